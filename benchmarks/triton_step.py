"""A LitGPT Llama training step (forward + loss + backward): eager, torch.compile, thunder + triton, Liger-Kernel.

The model is LitGPT's ``GPT`` built from a config in ``thunder.tests.litgpt_model`` (random
weights, nothing downloaded), followed by ``F.cross_entropy`` on the flattened logits. thunder
with ``thunder.discover()`` claims every kernel from the unmodified code: RMSNorm, RoPE, SwiGLU
and the fused linear + cross-entropy (``claimed`` lists them). The ``liger`` column runs the
same model with Liger's RMSNorm (``LigerRMSNorm``, sharing each norm's weight), SwiGLU
(``LigerSiLUMulFunction`` in the MLP) and fused linear + cross-entropy
(``LigerFusedLinearCrossEntropyLoss`` on the final hidden states); LitGPT rotates q and k in
separate ``apply_rope`` calls, which Liger's RoPE (q and k together) does not fit, so RoPE stays
eager there.

    python benchmarks/triton_step.py                       # llama2-like (2 layers, 4096 wide), batch 1 x 2048
    python benchmarks/triton_step.py --smoke

See benchmarks/triton_common.py for the JSON it prints.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from triton_common import Case, main


class LossStep(torch.nn.Module):
    """``cross_entropy(gpt(idx), targets)``; with ``liger_loss`` set, the lm_head and the loss are Liger's fused one."""

    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt
        self.liger_loss = None

    def forward(self, idx, targets):
        if self.liger_loss is not None:
            hidden = self.gpt(idx)  # lm_head is the identity while liger_loss is set
            return self.liger_loss(self.gpt.lm_head.weight, hidden.reshape(-1, hidden.size(-1)), targets.reshape(-1))
        logits = self.gpt(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


def _liger(step: LossStep, inputs):
    import litgpt.model
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss, LigerRMSNorm

    norms = {}

    def rms_forward(self, x):
        ln = norms.get(id(self))
        if ln is None:
            ln = LigerRMSNorm(self.weight.shape[0], eps=self.eps).to(self.weight.device, self.weight.dtype)
            ln.weight = self.weight
            norms[id(self)] = ln
        return ln(x)

    def mlp_forward(self, x):
        return self.proj(LigerSiLUMulFunction.apply(self.fc_1(x), self.fc_2(x)))

    fused = LigerFusedLinearCrossEntropyLoss(ignore_index=-1)

    @contextlib.contextmanager
    def patched():
        saved = (litgpt.model.RMSNorm.forward, litgpt.model.LLaMAMLP.forward)
        litgpt.model.RMSNorm.forward, litgpt.model.LLaMAMLP.forward = rms_forward, mlp_forward
        step.gpt.lm_head.forward = lambda x: x
        step.liger_loss = fused
        try:
            yield
        finally:
            litgpt.model.RMSNorm.forward, litgpt.model.LLaMAMLP.forward = saved
            del step.gpt.lm_head.forward
            step.liger_loss = None

    def call(idx, targets):
        with patched():
            return step(idx, targets)

    return call


def _case(config_name: str, batch: int, seq: int, **overrides) -> Case:
    def make(device, dtype):
        from thunder.tests.litgpt_model import GPT, Config

        config = Config.from_name(config_name, **overrides)
        with torch.device(device):
            gpt = GPT(config).to(dtype)
        idx = torch.randint(0, config.vocab_size, (batch, seq), device=device)
        targets = torch.randint(0, config.vocab_size, (batch, seq), device=device)
        return LossStep(gpt), [idx, targets]

    params = {"config": config_name, "batch": batch, "seq": seq, **overrides}
    return Case(f"{config_name}_{batch}x{seq}", make, _liger, params)


def cases(smoke: bool) -> list[Case]:
    if smoke:
        return [_case("llama-tiny", 1, 8, n_layer=1, n_embd=64, vocab_size=97, padded_vocab_size=101)]
    return [_case("llama2-like", 1, 2048), _case("llama-tiny", 8, 256)]


if __name__ == "__main__":
    main("triton_step", __doc__, cases)
