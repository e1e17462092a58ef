"""Where the kernels run: Triton's CPU interpreter by default, the GPU with THUNDER_TRITON_TEST_DEVICE=cuda.

By default the tests run the kernels in Triton's interpreter on CPU tensors: TRITON_INTERPRET=1
must be set before Triton is imported. With ``THUNDER_TRITON_TEST_DEVICE=cuda`` the interpreter
stays off (unless already set) and tensors the tests create without a device are CUDA tensors
(``torch.set_default_device``), so the compiled kernels run on the GPU.
"""

from __future__ import annotations

import os

import torch

ON_CUDA = os.environ.get("THUNDER_TRITON_TEST_DEVICE", "").strip().lower() == "cuda"

if ON_CUDA:
    torch.set_default_device("cuda")
else:
    os.environ["TRITON_INTERPRET"] = "1"


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _every_pattern_enabled():
    """The kernel tests check every kernel, also the opt-in ones (test_plugin.py checks the defaults)."""
    from thunder_triton import get_executor

    ex = get_executor()
    before = dict(ex.patterns)
    ex.enable_patterns(*ex.known_patterns)
    yield
    ex.patterns.clear()
    ex.patterns.update(before)
