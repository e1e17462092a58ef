"""In-place updates of tensors that require grad: gradients and the caller's autograd history as in eager."""

from __future__ import annotations

import pytest
import torch

import thunder


def _leaves(seed: int, n: int = 2):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(4, generator=g).requires_grad_() for _ in range(n)]


def _grads_match(f, prepare, seed=0):
    """Runs ``f`` eagerly and jitted on ``prepare(leaves)``; compares outputs and the leaves' gradients."""
    results = []
    for run in (f, thunder.jit(f)):
        leaves = _leaves(seed)
        args = prepare(leaves)
        out = run(*args)
        loss = out.sum() + sum(a.sum() for a in args if isinstance(a, torch.Tensor) and not a.is_leaf)
        loss.backward()
        results.append((out.detach(), [leaf.grad for leaf in leaves], [a.detach() for a in args]))
    (out_e, grads_e, args_e), (out_t, grads_t, args_t) = results
    torch.testing.assert_close(out_t, out_e)
    for ge, gt in zip(grads_e, grads_t):
        if ge is None:
            assert gt is None
        else:
            torch.testing.assert_close(gt, ge)
    for ae, at in zip(args_e, args_t):
        torch.testing.assert_close(at, ae)


@pytest.mark.parametrize("op", ["sigmoid_", "abs_", "sin_", "exp_", "tanh_", "relu_"])
def test_unary_inplace_on_local(op):
    def f(a, b):
        x = a * b
        getattr(x, op)()
        return x * a

    _grads_match(f, lambda leaves: leaves)


@pytest.mark.parametrize("op", ["sigmoid_", "sin_", "pow_", "clamp_"])
def test_unary_inplace_on_input_updates_callers_history(op):
    def f(x):
        if op == "pow_":
            x.pow_(2)
        elif op == "clamp_":
            x.clamp_(-0.5, 0.5)
        else:
            getattr(x, op)()
        return x * 2

    # the input is a non-leaf; the loss also reads it after the call, through its new history
    _grads_match(f, lambda leaves: [leaves[0] * 1])


def test_layerscale_inplace_mul_by_parameter():
    # timm's LayerScale(inplace=True): x.mul_(gamma); gamma's gradient needs x before the update
    def f(x, gamma):
        return x.mul_(gamma)

    _grads_match(f, lambda leaves: [leaves[0] * 1, leaves[1]])


def test_layerscale_module_inplace():
    class LayerScale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gamma = torch.nn.Parameter(torch.full((4,), 0.5))

        def forward(self, x):
            return x.mul_(self.gamma)

    grads = []
    for wrap in (lambda m: m, thunder.jit):
        m = LayerScale()
        a = _leaves(3, 1)[0]
        x = a * 3
        out = wrap(m)(x)
        assert out is x  # the in-place op returns its input
        (out * out).sum().backward()
        grads.append((m.gamma.grad, a.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_update_under_no_grad_of_a_leaf():
    def f(w, x):
        with torch.no_grad():
            w.add_(1)
        return (w * x).sum()

    ws = [torch.ones(3, requires_grad=True) for _ in range(2)]
    x = torch.arange(3.0)
    f(ws[0], x).backward()
    thunder.jit(f)(ws[1], x).backward()
    torch.testing.assert_close(ws[1], ws[0])
    torch.testing.assert_close(ws[1].grad, ws[0].grad)


def test_inplace_through_a_view_of_an_input():
    def f(x, g):
        x[1:].mul_(g[1:])
        return x * 1

    _grads_match(f, lambda leaves: [leaves[0] * 1, leaves[1]])


def test_update_through_detach_keeps_the_gradient_path():
    # eager: writing through a detached alias changes the values, not the leaf's gradient path
    def f(a):
        a.detach().t().sin_()
        return a * 3

    grads = []
    for run in (f, thunder.jit(f)):
        a = torch.linspace(-1, 1, 9, dtype=torch.float64).reshape(3, 3).requires_grad_()
        out = run(a)
        out.sum().backward()
        grads.append((out.detach(), a.detach().clone(), a.grad))
    torch.testing.assert_close(grads[1], grads[0])


def test_inplace_update_of_an_aliased_view_argument_with_grad():
    def f(a, b):
        b.mul_(2)
        return a * 1

    results = []
    for run in (f, thunder.jit(f)):
        leaf = torch.linspace(-1, 1, 6).reshape(2, 3).requires_grad_()
        x = leaf * 1
        out = run(x, x[0])
        out.sum().backward()
        results.append((out.detach(), leaf.grad))
    torch.testing.assert_close(results[1][0], results[0][0])


def test_copy_of_a_value_requiring_grad_into_an_integer_tensor():
    """An integer tensor updated in place with a float that requires grad holds the cast values and does not
    require grad (found by the fuzzer: thunder tried to make the integer stand-in require grad)."""

    def fn(a0, a1):
        a0.copy_(a1)
        return a0 * 2

    def inputs():
        return torch.tensor([[1, 0, -3], [-1, -2, -1]]), torch.tensor(
            [[1.5, -0.3, -2.2], [0.6, -1.1, -1.4]], requires_grad=True
        )

    e0, e1 = inputs()
    t0, t1 = inputs()
    expected, actual = fn(e0, e1), thunder.jit(fn)(t0, t1)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(t0, e0)
    assert actual.requires_grad is expected.requires_grad is False


def test_integer_tensor_filled_with_a_zero_dim_value_requiring_grad():
    """``a[0] = w.sum()`` on an integer ``a`` holds the cast value; eager marks ``a`` as requiring grad (a state its
    own backward rejects with an internal assert, unlike ``a[0] = w * 2``): thunder's integer output does not."""

    def fn(a, w):
        a[0] = w.prod(0)
        return a

    def inputs():
        return torch.tensor([[1, -3, -1], [-3, -2, 3]]), torch.tensor([-1.3, -0.4, 0.6], requires_grad=True)

    e_a, e_w = inputs()
    t_a, t_w = inputs()
    expected, actual = fn(e_a, e_w), thunder.jit(fn)(t_a, t_w)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(t_a, e_a)
    assert not actual.requires_grad


def test_saved_value_read_through_an_opaque_view_of_an_input_updated_in_place():
    # Tensor.select runs as an opaque torch call returning a view of the input: the value mul_'s backward
    # needs (the row before the update) is saved as a copy, not read from the input the program overwrites
    def f(w, x):
        row = x.select(0, -1)
        row.mul_(torch.sin(w))
        return row

    results = []
    for run in (f, thunder.jit(f)):
        g = torch.Generator().manual_seed(0)
        w = torch.randn((), generator=g, dtype=torch.float64, requires_grad=True)
        x = torch.randn(3, 3, generator=g, dtype=torch.float64)
        out = run(w, x)
        (grad,) = torch.autograd.grad((out * torch.arange(1.0, 4.0, dtype=torch.float64)).sum(), w)
        results.append((out.detach(), x.detach(), grad))
    torch.testing.assert_close(results[1], results[0])


def _base_of_updated_view_local(y):
    x = torch.zeros(3)
    v = x[:2]
    v.add_(y[:2])
    return x.requires_grad, v.requires_grad, x * 1


def _base_of_updated_view_argument(x, y):
    x[:2].add_(y[:2])
    return x.requires_grad, x * 1


def _update_under_no_grad(x, y):
    with torch.no_grad():
        x.copy_(y)
    return x.requires_grad, x * 1


@pytest.mark.parametrize(
    "fn", [_base_of_updated_view_local, _base_of_updated_view_argument, _update_under_no_grad], ids=lambda f: f.__name__
)
def test_requires_grad_user_code_reads_after_an_update_through_a_view(fn):
    # updating a view with a value that requires grad makes its base require grad too (not under no_grad)
    y = torch.randn(3, requires_grad=True)

    def args():  # (fresh ones for each run: the functions update their first argument)
        return (y,) if fn is _base_of_updated_view_local else (torch.zeros(3), y)

    expected = fn(*args())
    got = thunder.jit(fn)(*args())
    assert got[:-1] == expected[:-1]
    torch.testing.assert_close(got[-1], expected[-1])
    assert got[-1].requires_grad == expected[-1].requires_grad
