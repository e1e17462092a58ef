"""A LitGPT Llama training step with the executors thunder.discover() returns (the triton plugin among them).

Every kernel is claimed from LitGPT's own code, with no patching of the model: RMSNorm (its
module), SwiGLU (LLaMAMLP), the rotary embedding (apply_rope), and the lm_head + loss as one fused
linear + cross-entropy when the logits feed only the loss (the plain cross-entropy kernel when
they are also returned).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import thunder

pytest.importorskip("litgpt", reason="the LitGPT test needs litgpt (the package's [test] extra)")


class _WithLoss(torch.nn.Module):
    def __init__(self, gpt, return_logits=False):
        super().__init__()
        self.gpt = gpt
        self.return_logits = return_logits

    def forward(self, idx, targets):
        logits = self.gpt(idx)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1)
        return (loss, logits) if self.return_logits else loss


def _step(return_logits, dtype=torch.float32):
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    config = Config.from_name("llama-tiny", n_layer=1, vocab_size=97, padded_vocab_size=101, n_embd=64)
    model = _WithLoss(GPT(config), return_logits).to(dtype)
    reference = copy.deepcopy(model)

    executors = thunder.discover()
    assert "triton" in [ex.name for ex in executors]
    jmodel = thunder.jit(model, executors=executors)

    idx = torch.randint(0, 97, (2, 8))
    targets = torch.randint(0, 97, (2, 8))
    targets[0, :3] = -1  # padding positions

    out = jmodel(idx, targets)
    expected = reference(idx, targets)
    if return_logits:
        torch.testing.assert_close(out[1], expected[1], atol=1e-5, rtol=1e-5)
        out, expected = out[0], expected[0]
    out.backward()
    expected.backward()

    grads = dict(model.named_parameters())
    if dtype is torch.float32:
        torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name].grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)
    else:
        # bfloat16: the kernels round once where eager rounds after each op; compare relative to
        # each gradient's scale
        torch.testing.assert_close(out, expected, atol=2e-2, rtol=1e-2)
        for name, p in reference.named_parameters():
            scale = p.grad.float().abs().max().item()
            torch.testing.assert_close(grads[name].grad.float(), p.grad.float(), atol=0.05 * scale, rtol=0, msg=name)

    fwd = str(thunder.last_traces(jmodel)[-1])
    bwd = str(thunder.last_backward_traces(jmodel)[-1])
    # every RMSNorm (two per block, the final one) and the MLP's silu(fc_1) * fc_2
    assert fwd.count("triton_rms_norm(") == 3, fwd
    assert bwd.count("triton_rms_norm_backward(") == 3, bwd
    assert "triton_swiglu(" in fwd, fwd
    assert "triton_swiglu_backward(" in bwd, bwd
    # apply_rope on the queries and the keys
    assert fwd.count("triton_rope(") == 2, fwd
    assert bwd.count("triton_rope_backward(") == 2, bwd
    return fwd, bwd


def test_litgpt_training_step_uses_the_triton_kernels():
    fwd, bwd = _step(return_logits=False)
    assert "triton_linear_cross_entropy(" in fwd, fwd
    assert "triton_linear_cross_entropy_backward(" in bwd, bwd
    assert "triton_cross_entropy(" not in fwd


def test_litgpt_bfloat16_training_step():
    fwd, bwd = _step(return_logits=False, dtype=torch.bfloat16)
    assert "triton_linear_cross_entropy_backward(" in bwd, bwd


def test_returned_logits_keep_the_plain_cross_entropy_kernel():
    fwd, bwd = _step(return_logits=True)
    assert "triton_linear_cross_entropy(" not in fwd, fwd
    assert "triton_cross_entropy(" in fwd, fwd
    assert "triton_cross_entropy_backward(" in bwd, bwd
