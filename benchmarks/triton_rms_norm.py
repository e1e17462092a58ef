"""RMSNorm forward+backward: eager (LitGPT's RMSNorm module), torch.compile, thunder + triton, Liger-Kernel.

thunder claims the module's op chain as the ``triton_rms_norm`` kernel; Liger's is
``liger_kernel.transformers.LigerRMSNorm`` sharing the module's weight. Shapes are (tokens,
hidden); bfloat16 by default.

    python benchmarks/triton_rms_norm.py                  # on a GPU
    python benchmarks/triton_rms_norm.py --smoke          # tiny CPU run through Triton's interpreter

See benchmarks/triton_common.py for the JSON it prints.
"""

from __future__ import annotations

import torch
from triton_common import Case, main

SHAPES = [(4096, 4096), (8192, 4096), (8192, 8192)]
SMOKE_SHAPES = [(6, 32)]


def _case(tokens: int, hidden: int) -> Case:
    def make(device, dtype):
        from litgpt.model import RMSNorm

        norm = RMSNorm(hidden, eps=1e-5).to(device=device, dtype=dtype)
        with torch.no_grad():
            norm.weight.uniform_(0.5, 1.5)
        x = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
        return norm, [x]

    def liger(norm, inputs):
        from liger_kernel.transformers import LigerRMSNorm

        lnorm = LigerRMSNorm(hidden, eps=norm.eps).to(device=norm.weight.device, dtype=norm.weight.dtype)
        lnorm.weight = norm.weight  # the same parameter: its gradient is compared with eager's
        return lnorm

    return Case(f"{tokens}x{hidden}", make, liger, {"tokens": tokens, "hidden": hidden})


if __name__ == "__main__":
    main(
        "triton_rms_norm",
        __doc__,
        lambda smoke: [_case(*s) for s in (SMOKE_SHAPES if smoke else SHAPES)],
    )
