"""The forward/backward rematerialisation hook (FusionExecutor.rematerialize) and the min-cut helper."""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.extend import (
    FusionExecutor,
    is_cheap_to_recompute,
    rematerialize_forward_backward,
    saved_for_backward,
)


class _RematOnly(FusionExecutor):
    """Fuses nothing; recomputes cheap operations in backward through the public helper."""

    def __init__(self, can_recompute=is_cheap_to_recompute):
        super().__init__("remat_only")
        self.can_recompute = can_recompute
        self.seen = []

    def can_fuse(self, bsym) -> bool:
        return False

    def rematerialize(self, forward, backward):
        new = rematerialize_forward_backward(forward, backward, self.can_recompute)
        self.seen.append(((forward, backward), new))
        return new


def _saved(jfn) -> list:
    return list(saved_for_backward(thunder.last_traces(jfn)[-1]))


def _nbytes(proxies) -> int:
    return sum(p.numel() * p.dtype.bytes for p in proxies)


def _check_against_eager(fn, jfn, *args):
    out = jfn(*args)
    grads = torch.autograd.grad(out.sum(), args)
    ref = fn(*args)
    ref_grads = torch.autograd.grad(ref.sum(), args)
    torch.testing.assert_close(out, ref)
    for g, r in zip(grads, ref_grads):
        torch.testing.assert_close(g, r)


def test_recomputes_cheap_values_and_saves_fewer_bytes():
    def fn(a, b):
        return (a.exp() * b).tanh()

    a, b = (torch.randn(3, 5, requires_grad=True) for _ in range(2))
    plain = thunder.jit(fn)
    _check_against_eager(fn, plain, a, b)
    ex = _RematOnly()
    remat = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
    _check_against_eager(fn, remat, a, b)

    assert len(ex.seen) == 1
    before, after = _saved(plain), _saved(remat)
    # tanh's output, exp's output and b without the hook; the inputs a and b with it
    assert len(after) < len(before) and _nbytes(after) < _nbytes(before)
    assert sorted(p.name for p in after) == ["a", "b"]
    backward = str(thunder.last_backward_traces(remat)[-1])
    assert "torch.exp(a)" in backward and "torch.tanh(" in backward


def test_random_draws_are_saved_never_recomputed():
    def fn(a, b):
        return (a * torch.rand_like(a)).tanh() * b

    a = torch.randn(4, 4, requires_grad=True)
    b = (torch.rand(4, 4) + 0.5).requires_grad_()
    ex = _RematOnly()
    jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
    out = jfn(a, b)
    grad_b = torch.autograd.grad(out.sum(), b)[0]
    torch.testing.assert_close(grad_b, out / b)  # d(t * b)/db = t = out / b, with the forward's draw
    backward = thunder.last_backward_traces(jfn)[-1]
    assert not any("rand" in b.sym.name or "uniform" in b.sym.name for b in backward.bound_symbols)


def test_nothing_recomputable_or_no_gain_keeps_the_traces():
    def fn(a, b):
        return (a.exp() * b).tanh()

    a, b = (torch.randn(2, 3, requires_grad=True) for _ in range(2))
    ex = _RematOnly(can_recompute=lambda bsym: False)
    jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])
    _check_against_eager(fn, jfn, a, b)
    (given, returned) = ex.seen[0]
    assert returned[0] is given[0] and returned[1] is given[1]


def test_default_hook_changes_nothing():
    class Plain(FusionExecutor):
        def can_fuse(self, bsym) -> bool:
            return False

    fw, bw = object(), object()
    assert Plain("plain").rematerialize(fw, bw) == (fw, bw)


def test_the_cut_minimises_bytes_not_count():
    def fn(a):  # exp's backward needs its f32 output; its bf16 input is half the size
        return a.to(torch.bfloat16).float().exp()

    a = torch.randn(8, 16, requires_grad=True)
    plain = thunder.jit(fn)
    _check_against_eager(fn, plain, a)
    remat = thunder.jit(fn, executors=[_RematOnly(), *thunder.get_default_executors()])
    _check_against_eager(fn, remat, a)
    before, after = _saved(plain), _saved(remat)
    assert [p.dtype for p in before] == [thunder.dtypes.float32]
    assert [p.dtype for p in after] == [thunder.dtypes.bfloat16]
    assert _nbytes(after) * 2 == _nbytes(before)


def test_litgpt_llama_saves_less_with_equal_grads():
    pytest.importorskip("litgpt", reason="litgpt (a test dependency of thunder-core) is not installed")
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    config = Config.from_name("llama-tiny", n_layer=1)
    model = GPT(config)
    idx = torch.randint(0, config.padded_vocab_size, (1, 8))
    ref = model(idx)
    cotangent = torch.randn_like(ref)
    params = list(model.parameters())
    want = torch.autograd.grad(ref, params, cotangent)
    saved = []
    for executors in ([], [_RematOnly()]):
        jm = thunder.jit(model, executors=[*executors, *thunder.get_default_executors()])
        out = jm(idx)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
        for got, expected in zip(torch.autograd.grad(out, params, cotangent), want):
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
        saved.append([p for p in _saved(jm) if hasattr(p, "numel")])
    plain, remat = saved
    assert len(remat) < len(plain) and _nbytes(remat) < _nbytes(plain)
