"""A LitGPT training step with the executors thunder.discover() returns (the triton plugin among them)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import thunder

pytest.importorskip("litgpt", reason="the LitGPT test needs litgpt (the package's [test] extra)")


class _WithLoss(torch.nn.Module):
    def __init__(self, gpt):
        super().__init__()
        self.gpt = gpt

    def forward(self, idx, targets):
        logits = self.gpt(idx)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)


def test_litgpt_training_step_uses_the_triton_kernels():
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    config = Config.from_name("llama-tiny", n_layer=1, vocab_size=97, padded_vocab_size=101, n_embd=64)
    model = _WithLoss(GPT(config))
    reference = copy.deepcopy(model)

    executors = thunder.discover()
    assert "triton" in [ex.name for ex in executors]
    jmodel = thunder.jit(model, executors=executors)

    idx = torch.randint(0, 97, (2, 8))
    targets = torch.randint(0, 97, (2, 8))
    targets[0, :3] = -1  # padding positions

    loss = jmodel(idx, targets)
    loss.backward()
    expected = reference(idx, targets)
    expected.backward()

    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
    grads = dict(model.named_parameters())
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name].grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)

    fwd = str(thunder.last_traces(jmodel)[-1])
    bwd = str(thunder.last_backward_traces(jmodel)[-1])
    assert "triton_cross_entropy(" in fwd, fwd
    assert "triton_cross_entropy_backward(" in bwd, bwd
    # every RMSNorm (two per block, the final one) and the MLP's silu(fc_1) * fc_2
    assert fwd.count("triton_rms_norm(") == 3, fwd
    assert bwd.count("triton_rms_norm_backward(") == 3, bwd
    assert "triton_swiglu(" in fwd, fwd
    assert "triton_swiglu_backward(" in bwd, bwd
