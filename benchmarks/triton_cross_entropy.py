"""Cross-entropy forward+backward: eager, torch.compile, thunder + triton, Liger-Kernel.

``F.cross_entropy(logits, targets)`` on bfloat16 logits ``[tokens, vocabulary]`` (a few targets
ignored with ``ignore_index=-100``); thunder claims it as ``triton_cross_entropy``, Liger's is
``liger_kernel.transformers.LigerCrossEntropyLoss``. The peak memory column shows what the
fused kernels save: eager keeps the ``[N, V]`` log-softmax for backward.

    python benchmarks/triton_cross_entropy.py
    python benchmarks/triton_cross_entropy.py --smoke

See benchmarks/triton_common.py for the JSON it prints.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from triton_common import Case, main

SHAPES = [(4096, 32000), (4096, 50257), (4096, 128256), (8192, 128256)]
SMOKE_SHAPES = [(6, 50)]


def loss(logits, targets):
    return F.cross_entropy(logits, targets, ignore_index=-100)


def _case(tokens: int, vocab: int) -> Case:
    def make(device, dtype):
        logits = torch.randn(tokens, vocab, device=device, dtype=dtype, requires_grad=True)
        targets = torch.randint(0, vocab, (tokens,), device=device)
        targets[:: max(2, tokens // 16)] = -100
        return loss, [logits, targets]

    def liger(fn, inputs):
        from liger_kernel.transformers import LigerCrossEntropyLoss

        return LigerCrossEntropyLoss(ignore_index=-100)

    return Case(f"{tokens}x{vocab}", make, liger, {"tokens": tokens, "vocab": vocab})


if __name__ == "__main__":
    main("triton_cross_entropy", __doc__, lambda smoke: [_case(*s) for s in (SMOKE_SHAPES if smoke else SHAPES)])
