"""SwiGLU (``silu(a) * b``) forward+backward: eager, torch.compile, thunder + triton, Liger-Kernel.

thunder claims ``F.silu(a) * b`` as the ``triton_swiglu`` kernel; Liger's is
``liger_kernel.ops.swiglu.LigerSiLUMulFunction``. Shapes are (tokens, intermediate size), as
in a Llama MLP; bfloat16 by default.

    python benchmarks/triton_swiglu.py
    python benchmarks/triton_swiglu.py --smoke

See benchmarks/triton_common.py for the JSON it prints.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from triton_common import Case, main

SHAPES = [(4096, 11008), (8192, 14336)]
SMOKE_SHAPES = [(6, 40)]


def swiglu(a, b):
    return F.silu(a) * b


def _case(tokens: int, inter: int) -> Case:
    def make(device, dtype):
        a = torch.randn(tokens, inter, device=device, dtype=dtype, requires_grad=True)
        b = torch.randn(tokens, inter, device=device, dtype=dtype, requires_grad=True)
        return swiglu, [a, b]

    def liger(fn, inputs):
        from liger_kernel.ops.swiglu import LigerSiLUMulFunction

        return LigerSiLUMulFunction.apply

    return Case(f"{tokens}x{inter}", make, liger, {"tokens": tokens, "intermediate": inter})


if __name__ == "__main__":
    main(
        "triton_swiglu",
        __doc__,
        lambda smoke: [_case(*s) for s in (SMOKE_SHAPES if smoke else SHAPES)],
        patterns=("swiglu",),
    )
