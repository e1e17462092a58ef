"""``torch.vmap`` / ``torch.func`` inside functions traced by thunder: vmap and functional_call match
eager; the differentiating transforms raise a clear error."""

from __future__ import annotations

import pytest
import torch

import thunder


def _check(f, *args):
    expected = f(*args)
    jf = thunder.jit(f)
    actual = jf(*args)
    torch.testing.assert_close(actual, expected)
    return jf


def test_vmap_elementwise_with_unbatched_operand():
    def f(x, y):
        return torch.vmap(lambda a, b: a * b + 1, in_dims=(0, None))(x, y)

    _check(f, torch.randn(3, 4), torch.randn(4))


def test_vmap_reduction_per_example_and_new_ones():
    def f(x, w):
        return torch.func.vmap(lambda a: (a @ w).sum() + a.new_ones(()))(x)

    _check(f, torch.randn(5, 4), torch.randn(4, 2))


def test_vmap_in_dims_other_than_zero_and_out_dims():
    def f(x, y):
        return torch.vmap(lambda a, b: torch.sin(a) - b, in_dims=(1, 0), out_dims=1)(x, y)

    _check(f, torch.randn(4, 3), torch.randn(3, 4))


def test_vmap_output_independent_of_batch_is_expanded():
    def f(x, y):
        return torch.vmap(lambda a: y * 2, in_dims=0)(x)

    _check(f, torch.randn(3, 2), torch.randn(4))


def test_vmap_tuple_outputs_and_softmax():
    def f(x):
        return torch.vmap(lambda a: (torch.softmax(a, -1), a.max()))(x)

    _check(f, torch.randn(3, 5))


def test_nested_vmap_mask_function_like_transformers():
    """transformers 4.5x builds attention masks by vmapping a mask function over (batch, head, query, key)
    indices, indexing a padding mask with batched 0-d index tensors: it traces into broadcasting ops."""
    padding = torch.tensor([[1, 1, 0, 1, 1], [0, 1, 1, 1, 1]], dtype=torch.bool)

    def f(padding):
        def mask(b, h, q, kv):
            return (kv <= q) & padding[b, kv] & b.new_ones((), dtype=torch.bool)

        fn = mask
        for dims in [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)]:
            fn = torch.vmap(fn, in_dims=dims, out_dims=0)
        return fn(torch.arange(2), torch.arange(1), torch.arange(5), torch.arange(5))

    jf = _check(f, padding)
    # no per-element unrolling: a handful of broadcasting operations, whatever the sizes
    assert len(thunder.last_traces(jf)[0].bound_symbols) < 20


def test_vmap_gradients_match_eager():
    def f(x, w):
        return torch.vmap(lambda a: torch.tanh(a * w).sum())(x)

    x = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, requires_grad=True)
    expected = f(x, w)
    gx, gw = torch.autograd.grad(expected.sum(), (x, w))
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    actual = thunder.jit(f)(x2, w2)
    torch.testing.assert_close(actual, expected)
    ax, aw = torch.autograd.grad(actual.sum(), (x2, w2))
    torch.testing.assert_close(ax, gx)
    torch.testing.assert_close(aw, gw)


def test_vmap_outside_tracing_is_pytorchs():
    from torch._functorch.apis import vmap as pytorch_vmap

    thunder.jit(lambda x: torch.vmap(torch.sin)(x))(torch.ones(2, 3))
    assert torch.vmap is pytorch_vmap and torch.func.vmap is pytorch_vmap


def test_vmap_mismatched_sizes_is_a_clear_error():
    def f(x, y):
        return torch.vmap(lambda a, b: a + b)(x, y)

    with pytest.raises(Exception, match="vmapped dimensions have sizes"):
        thunder.jit(f)(torch.randn(3, 2), torch.randn(4, 2))


@pytest.mark.parametrize("transform", ["grad", "jacrev", "vjp"])
def test_differentiating_func_transforms_are_a_clear_error(transform):
    """torch.func.grad & co. inside traced code raise naming the line (they returned wrong values)."""

    def f(x):
        fn = getattr(torch.func, transform)
        if transform == "vjp":
            return fn(torch.sin, x)[0]
        return fn(lambda a: torch.sin(a).sum())(x)

    with pytest.raises(thunder.TracingError, match=rf"torch.func.{transform} inside .*test_vmap.py"):
        thunder.jit(f)(torch.randn(3))
    assert torch.func.grad(lambda a: (a * a).sum())(torch.ones(2)).tolist() == [2.0, 2.0]  # restored


def test_func_functional_call_matches_eager():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    params = {k: v.detach() * 2 for k, v in lin.named_parameters()}

    def f(x):
        return torch.func.functional_call(lin, params, (x,))

    _check(f, torch.randn(4, 3))


def test_vmap_of_dimension_dependent_activations():
    def f(x, w):
        return torch.vmap(lambda a: torch.nn.functional.glu(a, 0) + torch.nn.functional.prelu(a[:2], w))(x)

    _check(f, torch.randn(3, 4, 5), torch.rand(5))


def test_vmap_casts_and_basic_indexing_of_batched_values_are_one_call():
    """``.to(dtype)`` and ``x[..., 1:]`` on a batched value run once on the whole batch (not once per element,
    which made the batch size a number of the program: transformers 4.x's masks then compiled per length)."""

    def f(x):
        def row(r):
            return r.to(torch.float64)[1:] * 2 + r[0]

        return torch.vmap(row)(x)

    jf = thunder.jit(f)
    for n in (5, 7, 9):
        x = torch.randn(n, 4)
        torch.testing.assert_close(jf(x), f(x))
    assert thunder.cache_misses(jf) == 2  # the first size, then the batch size symbolic
    assert "stack" not in str(thunder.last_traces(jf)[-1])
