"""Autodiff: outputs carry ThunderFunctionBackward and gradients equal PyTorch autograd's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.core.transforms import grad, value_and_grad, vjp


def _grads_like_eager(fn, *shapes, dtype=torch.float64, extra=(), atol=1e-9, rtol=1e-7):
    torch.manual_seed(0)
    inputs = [torch.randn(s, dtype=dtype, requires_grad=True) for s in shapes]
    jfn = thunder.jit(fn)
    out = jfn(*inputs, *extra)
    assert out.grad_fn is not None and type(out.grad_fn).__name__ == "ThunderFunctionBackward"
    cot = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, cot)
    expected_out = fn(*inputs, *extra)
    expected = torch.autograd.grad(expected_out, inputs, cot)
    torch.testing.assert_close(out, expected_out, atol=atol, rtol=rtol)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, atol=atol, rtol=rtol)
    return jfn


CASES = {
    "elementwise": (lambda a, b: (a * b + a.sin()).exp() / (b.abs() + 1), (3, 4), (3, 4)),
    "broadcasting": (lambda a, b: a * b - b, (3, 1), (4,)),
    "reductions": (lambda a: a.sum(0) + a.mean(1).sum() + a.amax(1).sum() + a.var(0), (5, 4)),
    "matmul_batched": (lambda a, b: a @ b, (2, 3, 4), (4, 5)),
    "matmul_vector": (lambda a, b: a @ b, (4,), (4, 3)),
    "linear_bias": (lambda a, w, b: F.linear(a, w, b), (2, 3, 4), (5, 4), (5,)),
    "softmax": (lambda a: F.softmax(a, -1) * a, (3, 6)),
    "log_softmax": (lambda a: F.log_softmax(a, 1), (3, 6)),
    "silu_gelu": (lambda a: F.silu(a) + F.gelu(a) + F.gelu(a, approximate="tanh"), (4, 5)),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (6,), w, b), (3, 6), (6,), (6,)),
    "rms_norm": (lambda a, w: F.rms_norm(a, (6,), w, 1e-6), (3, 6), (6,)),
    "shape_ops": (lambda a: a.permute(2, 0, 1).reshape(4, -1)[1:, ::2].transpose(0, 1).flip(0), (2, 3, 4)),
    "cat_split": (lambda a, b: torch.cat(torch.split(torch.cat([a, b], 1), 3, dim=1)[::-1], 0), (2, 3), (2, 3)),
    "where_masked_fill": (lambda a, b: torch.where(a > 0, a, b).masked_fill(b > 1, 0.5), (4, 4), (4, 4)),
    "pow_div_clamp": (lambda a, b: (a.abs() + 1).pow(b) / (b * b + 1) + a.clamp(-0.5, 0.5), (3, 3), (3, 3)),
    "tanh_sigmoid_log": (lambda a: torch.tanh(a) * torch.sigmoid(a) + torch.log(a * a + 1), (3, 4)),
    "cumsum": (lambda a: torch.cumsum(a, 1), (3, 4)),
    "sdpa_causal": (
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        (1, 2, 5, 4),
        (1, 2, 5, 4),
        (1, 2, 5, 4),
    ),
    "getitem_unsqueeze_expand": (lambda a: a[None, :, 1].expand(3, 4) * 2, (4, 3)),
    "to_dtype": (lambda a: (a.float() * 2).double(), (3,)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_match_pytorch(name):
    fn, *shapes = CASES[name]
    _grads_like_eager(fn, *shapes)


def test_cross_entropy_with_ignore_index_and_label_smoothing():
    target = torch.tensor([1, -100, 0, 3])
    _grads_like_eager(lambda x: F.cross_entropy(x, target, label_smoothing=0.1), (4, 5))
    _grads_like_eager(lambda x: F.cross_entropy(x, target, reduction="sum"), (4, 5))


def test_embedding_with_padding_idx():
    idx = torch.tensor([[0, 2, 1], [2, 2, 3]])
    _grads_like_eager(lambda w: F.embedding(idx, w, padding_idx=2), (4, 3))


def test_module_parameters_get_gradients():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    ref.load_state_dict(m.state_dict())
    x = torch.randn(3, 4)
    tm = thunder.jit(m)
    tm(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    for (n, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=n)


def test_backward_trace_is_readable_and_saves_for_backward():
    def f(a, b):
        return (a * b).sin().sum()

    a = torch.randn(3, requires_grad=True)
    jf = thunder.jit(f)
    jf(a, torch.randn(3)).backward()
    fwd = str(thunder.last_traces(jf)[-1])
    bwd = str(thunder.last_backward_traces(jf)[-1])
    assert "def augmented_forward_fn(a, b):" in fwd
    assert "return ((" in fwd  # outputs, then what is saved for backward
    assert "def backward_fn(saved_for_backward, cotangents):" in bwd
    assert "= saved_for_backward" in bwd and "torch.cos(" in bwd
    compile(bwd, "<backward>", "exec")


def test_no_grad_and_inference_mode_build_no_backward():
    x = torch.randn(3, requires_grad=True)
    jf = thunder.jit(lambda x: x * 2)
    with torch.no_grad():
        assert jf(x).grad_fn is None
    with torch.inference_mode():
        assert not jf(x).requires_grad
    assert jf(x).grad_fn is not None


def test_disable_torch_autograd_gives_forward_only_program():
    x = torch.randn(3, requires_grad=True)
    jf = thunder.jit(lambda x: x * 2, disable_torch_autograd=True)
    y = jf(x)
    assert not y.requires_grad
    torch.testing.assert_close(y, x.detach() * 2)
    assert "@torch.no_grad()" in str(thunder.last_traces(jf)[-1])


def test_retain_graph_and_gradient_accumulation():
    x = torch.randn(3, requires_grad=True)
    jf = thunder.jit(lambda x: (x * x).sum())
    y = jf(x)
    y.backward(retain_graph=True)
    y.backward()
    jf(x).backward()  # accumulates into .grad like eager
    torch.testing.assert_close(x.grad, 6 * x.detach())


def test_non_differentiable_integer_output_and_alias_output():
    x = torch.randn(3, 4, requires_grad=True)
    jf = thunder.jit(lambda x: (x.view(-1), x.argmax(1), x * 3))
    flat, idx, tripled = jf(x)
    assert not idx.requires_grad and idx.dtype == torch.int64
    torch.testing.assert_close(idx, x.argmax(1))
    (flat.sum() + tripled.sum()).backward()
    torch.testing.assert_close(x.grad, torch.full_like(x, 4.0))


def test_double_backward_raises_a_clear_error():
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    jf = thunder.jit(lambda x: (x * x * x).sum())
    with pytest.raises(RuntimeError, match="first-order gradients only"):
        torch.autograd.grad(jf(x), x, create_graph=True)


def test_functional_grad_vjp_value_and_grad():
    def f(a, b):
        return a * b + a.exp()

    a, b = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    ar, br = a.clone().requires_grad_(), b.clone().requires_grad_()
    ref = torch.autograd.grad(f(ar, br).sum(), (ar, br))
    ga, gb = grad(thunder.jit(f))(a, b)
    torch.testing.assert_close(ga, ref[0])
    torch.testing.assert_close(gb, ref[1])
    value, (ga2, _) = value_and_grad(thunder.jit(f))(a, b)
    torch.testing.assert_close(value, f(a, b))
    torch.testing.assert_close(ga2, ref[0])
    cot = torch.randn(2, 3, dtype=torch.float64)
    out, (va, vb) = vjp(thunder.jit(f))((a, b), cot)
    ref2 = torch.autograd.grad(f(ar, br), (ar, br), cot)
    torch.testing.assert_close(out, f(a, b))
    torch.testing.assert_close(va, ref2[0])
    torch.testing.assert_close(vb, ref2[1])


def _tiny_litgpt():
    from thunder.tests.litgpt_model import GPT, Config

    cfg = Config.from_name("llama-tiny")
    cfg.n_layer = 2
    return GPT(cfg)


def test_litgpt_training_loop_matches_eager():
    torch.manual_seed(0)
    model, ref = _tiny_litgpt(), _tiny_litgpt()
    ref.load_state_dict(model.state_dict())
    tm = thunder.jit(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    x = torch.randint(0, 1024, (2, 32))
    y = torch.randint(0, 1024, (2, 32))
    for _ in range(3):
        for m, o in ((tm, opt), (ref, ref_opt)):
            o.zero_grad()
            logits = m(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            loss.backward()
            o.step()
            if m is tm:
                thunder_loss = loss.detach()
        torch.testing.assert_close(thunder_loss, loss.detach(), atol=1e-5, rtol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4)


def test_huggingface_llama_training_loop_matches_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        vocab_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ref = transformers.LlamaForCausalLM(cfg)
    ref.load_state_dict(model.state_dict())
    tm = thunder.jit(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    for _ in range(3):
        ids = torch.randint(0, 64, (2, 16))
        losses = []
        for m, o in ((tm, opt), (ref, ref_opt)):
            o.zero_grad()
            out = m(input_ids=ids, labels=ids)
            out.loss.backward()
            o.step()
            losses.append(out.loss.detach())
        torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=1e-5)
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=n)


def test_batchnorm_training_with_gradients_updates_buffers_like_eager():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    ref = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    ref.load_state_dict(m.state_dict())
    tm = thunder.jit(m)
    for _ in range(2):
        x = torch.randn(5, 4)
        tm(x).pow(2).sum().backward()
        ref(x).pow(2).sum().backward()
    torch.testing.assert_close(m[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(m[1].running_var, ref[1].running_var)
    assert m[1].num_batches_tracked.item() == ref[1].num_batches_tracked.item() == 2
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("recompute", [None, "elementwise", "reshapes"])
def test_recompute_option_chooses_between_saving_and_recomputing_elementwise_values(recompute):
    def f(x, w):
        h = torch.nn.functional.silu(x @ w)  # h is read by the backward of h * h
        return (h * h).sum()

    x, w = torch.randn(4, 8), torch.randn(8, 8, requires_grad=True)
    jf = thunder.jit(f) if recompute is None else thunder.jit(f, recompute=recompute)
    jf(x, w).backward()
    ref_w = w.detach().clone().requires_grad_()
    f(x, ref_w).backward()
    torch.testing.assert_close(w.grad, ref_w.grad)
    saved = thunder.last_traces(jf)[-1].bound_symbols[-1].args[0][1]
    backward = str(thunder.last_backward_traces(jf)[-1])
    if recompute == "reshapes":  # saved as eager saves it: no kernel more than eager's
        assert len(saved) == 3 and "silu(" not in backward
    else:  # the default: x and x @ w are saved anyway, silu(x @ w) is made again from them
        assert len(saved) == 2 and "silu(" in backward


def test_recompute_option_rejects_unknown_values():
    jf = thunder.jit(lambda x: x.sin(), recompute="everything")
    with pytest.raises(ValueError, match="recompute='everything'"):
        jf(torch.randn(3, requires_grad=True))


def test_opaque_fallback_ops_get_gradients_from_pytorch_autograd():
    def f(x, y):
        return torch.cdist(x, y).sum(1) + torch.logcumsumexp(x, 1).sum(1)

    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    y = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    jf = thunder.jit(f)
    got = torch.autograd.grad(jf(x, y).sum(), (x, y))
    expected = torch.autograd.grad(f(x, y).sum(), (x, y))
    assert "fallback" in [r["symbol"] for r in thunder.last_interpreter_log(jf)]
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_an_output_no_gradient_reaches_gets_a_zero_cotangent():
    # slogdet has two float outputs; only one is used, so the other's cotangent is zeros
    def f(x):
        return torch.linalg.slogdet(x)[1] * 2

    x = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    (got,) = torch.autograd.grad(thunder.jit(f)(x), x)
    (expected,) = torch.autograd.grad(f(x), x)
    torch.testing.assert_close(got, expected)
