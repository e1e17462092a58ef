"""Symbolic sizes: ``cache="symbolic values"`` and the default's automatic dynamic dimensions.

A trace with symbolic sizes must answer every call it accepts exactly as eager does, and reject (recompile
for) the calls that break a relation it relied on; each test compares with eager PyTorch.
"""

from __future__ import annotations

import copy

import pytest
import torch
from training_checks import assert_step_like_eager

import thunder


def _misses(jf) -> int:
    return thunder.cache_misses(jf)


def test_one_program_for_many_sizes():
    def f(x, y):
        b, t = x.shape
        z = (x * 2).reshape(b * t)
        return z.sum() + y.view(-1, 2).sum(0), z[: t + 1], x[:, -1]

    jf = thunder.jit(f, cache="symbolic values")
    for b, t, n in ((3, 4, 6), (5, 7, 10), (2, 9, 4), (4, 4, 8)):
        x, y = torch.randn(b, t), torch.randn(n)
        for a, e in zip(jf(x, y), f(x, y), strict=True):
            torch.testing.assert_close(a, e)
    assert _misses(jf) == 1
    trace = str(thunder.last_traces(jf)[0])
    assert "s0" in trace and "s1" in trace  # the sizes are variables of the program


def test_a_broken_relation_recompiles_and_errors_like_eager():
    def f(y):
        return y.view(-1, 2) * 3

    jf = thunder.jit(f, cache="symbolic values")
    for n in (4, 8):
        y = torch.randn(n)
        torch.testing.assert_close(jf(y), f(y))
    assert _misses(jf) == 1
    y = torch.randn(7)  # the trace relied on n % 2 == 0: this call is not answered by it
    with pytest.raises(RuntimeError, match="invalid"):
        f(y)
    with pytest.raises(RuntimeError, match="invalid"):
        jf(y)


def test_relations_between_inputs_are_guarded():
    def f(a, b):
        return a + b  # the trace relies on a's size equal to b's

    jf = thunder.jit(f, cache="symbolic values")
    a, b = torch.randn(5), torch.randn(5)
    torch.testing.assert_close(jf(a, b), f(a, b))
    a, b = torch.randn(9), torch.randn(9)
    torch.testing.assert_close(jf(a, b), f(a, b))
    assert _misses(jf) == 1
    a, b = torch.randn(9), torch.randn(1)  # broadcasting: another program, still eager's answer
    torch.testing.assert_close(jf(a, b), f(a, b))
    with pytest.raises(RuntimeError):
        jf(torch.randn(4), torch.randn(3))


def test_sizes_zero_and_one_are_specialised():
    def f(x):
        return x.sum(0, keepdim=True) * x

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 1, 5, 1, 0):
        x = torch.randn(n, 2)
        torch.testing.assert_close(jf(x), f(x))
    assert _misses(jf) == 3  # n >= 2, n == 1 and n == 0


def test_automatic_dynamic_after_a_size_change():
    def f(x):
        return torch.softmax(x @ x.transpose(-1, -2), -1)

    jf = thunder.jit(f)
    for t in (4, 5, 6, 9, 12):
        x = torch.randn(2, t, 3)
        torch.testing.assert_close(jf(x), f(x))
    assert _misses(jf) == 2  # the first size, then one program for every length


def test_opaque_op_keeps_sizes_symbolic():
    def f(x, i, j):
        return x[i, j] + 1  # advanced indexing with two index tensors runs as an opaque op

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 6):
        x = torch.randn(n, 4)
        i = torch.arange(n)
        j = torch.zeros(n, dtype=torch.long)
        torch.testing.assert_close(jf(x, i, j), f(x, i, j))
    assert _misses(jf) == 1


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 16)
        self.attn = torch.nn.MultiheadAttention(16, 2, batch_first=True)
        self.norm = torch.nn.LayerNorm(16)
        self.head = torch.nn.Linear(16, 50)

    def forward(self, ids):
        h = self.emb(ids)
        t = ids.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1)
        a, _ = self.attn(h, h, h, attn_mask=mask, need_weights=False)
        return self.head(self.norm(h + a))


def test_training_on_variable_lengths_does_not_recompile_per_length():
    torch.manual_seed(0)
    model = _Net()
    ref = copy.deepcopy(model)
    jm = thunder.jit(model)
    for t in (5, 7, 6, 11, 8):
        ids = torch.randint(0, 50, (2, t))
        out, expected = jm(ids), ref(ids)
        assert_step_like_eager(model, ref, out, expected)
    assert _misses(jm) == 2


def test_symbolic_values_with_an_in_place_update_of_an_input():
    def f(x, y):
        x.add_(y[: x.shape[0]])
        return x * 2

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 5, 8):
        x, y = torch.randn(n, 2), torch.randn(n + 2, 2)
        xe = x.clone()
        out = jf(x, y)
        expected = f(xe, y)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x, xe)  # the caller's tensor is updated
    # a non-contiguous input: its layout is specialised, still eager's answer
    x = torch.randn(2, 6).t()
    xe = x.clone()
    y = torch.randn(8, 2)
    torch.testing.assert_close(jf(x, y), f(xe, y))
    torch.testing.assert_close(x, xe)


def test_unknown_cache_option_names_the_choices():
    with pytest.raises(ValueError, match="symbolic values"):
        thunder.jit(lambda x: x, cache="symbolic sizes")


# ---------------------------------------------------------------- data-dependent sizes


def _masked_ops(x, m):
    idx = torch.nonzero(m)
    y = x[m]
    r, c = torch.where(m)
    picked = x[r, c]
    return idx.float().sum(0), y * 2, (picked + 1).sum(), y.shape[0], torch.masked_select(x, m).exp()


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_data_dependent_sizes_are_run_time_sizes(cache):
    """nonzero, boolean masks, where(cond): their output sizes are read from the output when the program runs,
    so one program answers every mask (including all-False and all-True ones)."""
    jf = thunder.jit(_masked_ops, cache=cache)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=gen)
    for m in (x > 0, x > 1, torch.zeros_like(x, dtype=torch.bool), torch.ones_like(x, dtype=torch.bool)):
        actual, expected = jf(x, m), _masked_ops(x, m)
        for a, e in zip(actual, expected, strict=True):
            if isinstance(e, int):
                assert type(a) is int and a == e
            else:
                torch.testing.assert_close(a, e)
    assert _misses(jf) == 1
    assert "nonzero" in str(thunder.last_traces(jf)[-1])


def test_gradients_through_data_dependent_sizes():
    def f(x, w):
        keep = torch.nonzero(x.abs().sum(-1) > 1.0).squeeze(-1)
        rows = x[keep] @ w
        return torch.zeros(x.shape[0], w.shape[1]).index_add(0, keep, rows).tanh()

    jf = thunder.jit(f)
    for seed in (0, 1, 2):
        gen = torch.Generator().manual_seed(seed)
        x = torch.randn(6, 3, generator=gen, requires_grad=True)
        w = torch.randn(3, 2, generator=gen, requires_grad=True)
        out, expected = jf(x, w), f(x, w)
        torch.testing.assert_close(out, expected)
        got = torch.autograd.grad(out.sum(), (x, w))
        want = torch.autograd.grad(expected.sum(), (x, w))
        for a, e in zip(got, want, strict=True):
            torch.testing.assert_close(a, e)
    assert _misses(jf) == 1


def test_a_decision_on_a_data_dependent_size_is_a_clear_error():
    def f(x):
        y = x[x > 0]
        if y.shape[0] > 2:  # Python control flow on a size only known when the program runs
            return y * 2
        return y

    with pytest.raises(thunder.TracingError, match="depends on tensor values") as info:
        thunder.jit(f)(torch.randn(8))
    assert "y.shape[0] > 2" in str(info.value)  # the user's line


# ---------------------------------------------------------------- regressions found by running the suite symbolically


def test_a_float_computed_from_sizes_keeps_its_value():
    """layer_norm's gradient divides by the normalized size: a float constant of the trace (printed as 0 once)."""
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, requires_grad=True)
    jf = thunder.jit(torch.nn.functional.layer_norm, cache="symbolic values")
    out, expected = jf(x, (4,), w), torch.nn.functional.layer_norm(x, (4,), w)
    g = torch.randn_like(expected)
    for a, e in zip(torch.autograd.grad(out, (x, w), g), torch.autograd.grad(expected, (x, w), g), strict=True):
        torch.testing.assert_close(a, e)


def test_sizes_inside_a_torch_size_argument_stay_alive():
    """``x.view(x.shape[:-1] + (-1,))`` passes a torch.Size holding symbolic sizes: the program must keep them."""

    def f(x):
        a = torch.ones(x.shape[0], 4) + x  # a use of the size as an argument
        b = (a * 2).view(x.shape[:-1] + (2, -1))  # a later use inside a torch.Size
        return b.sum(-1)

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 5):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x), f(x))
