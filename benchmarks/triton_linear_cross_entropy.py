"""Fused linear + cross-entropy (the lm_head and the loss) forward+backward: eager, torch.compile, thunder + triton, Liger.

The eager code is ``F.cross_entropy(F.linear(h, W), targets)``; thunder claims it as the
``triton_linear_cross_entropy`` kernel (logits computed and freed chunk by chunk); Liger's is
``liger_kernel.transformers.LigerFusedLinearCrossEntropyLoss``. Shapes are (tokens, hidden,
vocabulary); bfloat16 by default. The peak memory column is the point of this kernel.

    python benchmarks/triton_linear_cross_entropy.py
    python benchmarks/triton_linear_cross_entropy.py --smoke

See benchmarks/triton_common.py for the JSON it prints.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from triton_common import Case, main

SHAPES = [(4096, 4096, 32000), (4096, 4096, 128256), (8192, 4096, 128256)]
SMOKE_SHAPES = [(6, 16, 50)]


def lm_loss(h, w, targets):
    return F.cross_entropy(F.linear(h, w), targets)


def _case(tokens: int, hidden: int, vocab: int) -> Case:
    def make(device, dtype):
        h = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
        w = (torch.randn(vocab, hidden, device=device, dtype=dtype) / hidden**0.5).requires_grad_()
        targets = torch.randint(0, vocab, (tokens,), device=device)
        targets[:: max(2, tokens // 16)] = -100
        return lm_loss, [h, w, targets]

    def liger(fn, inputs):
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        loss = LigerFusedLinearCrossEntropyLoss(ignore_index=-100)
        return lambda h, w, targets: loss(w, h, targets)

    return Case(f"{tokens}x{hidden}x{vocab}", make, liger, {"tokens": tokens, "hidden": hidden, "vocab": vocab})


if __name__ == "__main__":
    main(
        "triton_linear_cross_entropy",
        __doc__,
        lambda smoke: [_case(*s) for s in (SMOKE_SHAPES if smoke else SHAPES)],
        patterns=("linear_cross_entropy",),
    )
