"""thunder.jit refuses modules whose parallelism PyTorch runs outside the traced code, with an error naming the fix.

The multi-process cases (torch DDP, FSDP2's fully_shard, parallelize_module) are in
packages/thunder-distributed/tests (scenario ``interop``); this one needs no process group.
"""

from __future__ import annotations

import pytest
import torch

import thunder


def test_data_parallel_wrapper_is_a_clear_error():
    wrapped = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    with pytest.raises(TypeError, match=r"torch's DataParallel is not supported.*thunder\.distributed\.ddp"):
        thunder.jit(wrapped)


def test_the_wrapped_module_itself_still_compiles():
    wrapped = torch.nn.DataParallel(torch.nn.Linear(3, 2))
    x = torch.randn(4, 3)
    torch.testing.assert_close(thunder.jit(wrapped.module)(x), wrapped.module(x))
