"""A Hugging Face Llama training step (``LlamaForCausalLM(...).loss``) with the triton executor.

All kernels are claimed from transformers' own code: LlamaRMSNorm, apply_rotary_pos_emb,
LlamaMLP's act_fn(gate_proj(x)) * up_proj(x), and lm_head + ForCausalLMLoss (which upcasts the
logits to float32) as the fused linear + cross-entropy, since only the loss is returned.
"""

from __future__ import annotations

import copy

import pytest
import torch
from _helpers import EXECUTORS

import thunder

transformers = pytest.importorskip("transformers", reason="the HF Llama test needs transformers (the [test] extra)")


class _Loss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_hf_llama_training_step(dtype):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    model = _Loss(transformers.LlamaForCausalLM(config)).to(dtype)
    reference = copy.deepcopy(model)
    jmodel = thunder.jit(model, executors=EXECUTORS)
    ids = torch.randint(0, 97, (2, 8))
    labels = ids.clone()
    labels[0, :2] = -100

    loss = jmodel(ids, labels)
    expected = reference(ids, labels)
    loss.backward()
    expected.backward()
    grads = dict(model.named_parameters())
    if dtype is torch.float32:
        torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-5)
        for name, p in reference.named_parameters():
            torch.testing.assert_close(grads[name].grad, p.grad, atol=1e-5, rtol=1e-4, msg=name)
    else:
        torch.testing.assert_close(loss, expected, atol=2e-2, rtol=1e-2)
        for name, p in reference.named_parameters():
            scale = p.grad.float().abs().max().item()
            torch.testing.assert_close(grads[name].grad.float(), p.grad.float(), atol=0.05 * scale, rtol=0, msg=name)

    fwd = str(thunder.last_traces(jmodel)[-1])
    bwd = str(thunder.last_backward_traces(jmodel)[-1])
    for op, count in [
        ("triton_rms_norm", 3),
        ("triton_rope", 2),
        ("triton_swiglu", 1),
        ("triton_linear_cross_entropy", 1),
    ]:
        assert fwd.count(f"{op}(") == count, (op, fwd)
        assert bwd.count(f"{op}_backward(") == count, (op, bwd)
