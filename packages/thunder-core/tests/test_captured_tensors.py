"""Tensors a jitted function reads from outside its arguments (a global, a closure, a module that is not the jitted one).

One that requires grad is an input of the program, passed by the prologue (the tensor itself, as the function
holds it): gradients reach it as in eager's backward, in-place updates under no_grad reach it as an argument's, and
its current values are read at every call. (Before, it was a constant of the program and its gradient was lost, so
thunder.jit refused it.) Every case is compared with eager PyTorch on the same tensors.
"""

from __future__ import annotations

import copy

import pytest
import torch

import thunder

_LINEAR = torch.nn.Linear(3, 3)


def _through_the_global_module(x):
    return _LINEAR(x * 2)


def _programs(w, nonleaf):
    def times(x):
        return x * w

    def through_a_non_leaf(x):
        return (x * nonleaf).sin()

    def read_first_without_grad(x):
        with torch.no_grad():
            s = w.sum()
        return x * w * s

    def view_of_it_returned(x):
        return w.unsqueeze(0)

    def views_of_it(x):
        return w.view(3, 1).t().squeeze(0) * x + w[1:].sum()

    def updated_without_grad(x):
        with torch.no_grad():
            w.mul_(2)
        return x * w

    def detached_and_sizes(x):
        return x * w.detach() + w.shape[0]

    return [
        times,
        through_a_non_leaf,
        read_first_without_grad,
        view_of_it_returned,
        views_of_it,
        updated_without_grad,
        detached_and_sizes,
    ]


def _run(f, x, w):
    out = f(x)
    facts = (out.dtype, out.requires_grad, out._base is not None, out._base is w)
    grads = None
    if out.requires_grad:
        grads = torch.autograd.grad((out * torch.arange(1.0, 4.0)).sum(), (w, x), allow_unused=True, retain_graph=True)
    return out.detach().clone(), facts, grads, w.detach().clone(), w._version


@pytest.mark.parametrize("index", range(7))
def test_a_captured_tensor_requiring_grad_gets_eagers_gradient(index):
    torch.manual_seed(index)
    w0 = torch.randn(3)
    x = torch.randn(3, requires_grad=True)
    w = w0.clone().requires_grad_()
    nonleaf = w * 2
    fn = _programs(w, nonleaf)[index]
    jfn = thunder.jit(fn)
    for call in range(2):  # (the second call goes through the cache and reads the tensor's current values)
        with torch.no_grad():
            w.copy_(w0 + call)
        expected = _run(fn, x, w)
        with torch.no_grad():
            w.copy_(w0 + call)
        actual = _run(jfn, x, w)
        assert actual[1] == expected[1], f"{fn.__name__}: (dtype, requires_grad, is view, views w) differ"
        torch.testing.assert_close(actual[0], expected[0])
        assert (actual[2] is None) == (expected[2] is None)
        if expected[2] is not None:
            assert [g is None for g in actual[2]] == [g is None for g in expected[2]]
            torch.testing.assert_close(actual[2], expected[2])
        torch.testing.assert_close(actual[3], expected[3])  # (its values after the call)
        if index != 5:  # (the update bumps w's version once in each; the counts then differ by the calls)
            assert w._version == actual[4]


def test_the_global_modules_parameters_get_eagers_gradients_and_training_matches():
    x = torch.randn(4, 3, requires_grad=True)
    ref = copy.deepcopy(_LINEAR)
    jf = thunder.jit(_through_the_global_module)
    opt = torch.optim.SGD(_LINEAR.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):  # (the optimizer updates the parameters in place between calls: no stale values)
        opt.zero_grad()
        ref_opt.zero_grad()
        jf(x).pow(2).sum().backward()
        ref(x * 2).pow(2).sum().backward()
        torch.testing.assert_close(_LINEAR.weight.grad, ref.weight.grad)
        torch.testing.assert_close(_LINEAR.bias.grad, ref.bias.grad)
        opt.step()
        ref_opt.step()
    torch.testing.assert_close(_LINEAR.weight, ref.weight)
    with torch.no_grad():
        torch.testing.assert_close(jf(x), ref(x * 2))


def test_a_captured_tensor_that_stops_requiring_grad_is_traced_again():
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)

    def fn(x):
        return x * w

    jf = thunder.jit(fn)
    assert jf(x).requires_grad
    w.requires_grad_(False)
    out = jf(x)
    assert not out.requires_grad and not fn(x).requires_grad
    torch.testing.assert_close(out, fn(x))


def test_a_captured_tensor_also_passed_as_an_argument_is_one_tensor():
    w = torch.randn(3, requires_grad=True)
    x = torch.randn(3)

    def fn(x, v):
        return (x * v * w).sin()

    (expected,) = torch.autograd.grad(fn(x, w).sum(), w)
    (actual,) = torch.autograd.grad(thunder.jit(fn)(x, w).sum(), w)
    torch.testing.assert_close(actual, expected)


def test_an_in_place_update_of_a_captured_leaf_with_grad_raises_eagers_error_naming_the_line():
    w = torch.randn(3, requires_grad=True)

    def fn(x):
        w.mul_(2)
        return x * w

    with pytest.raises(RuntimeError, match="leaf Variable that requires grad") as info:
        thunder.jit(fn)(torch.randn(3))
    assert __file__ in str(info.value)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        fn(torch.randn(3))


_REBOUND = torch.randn(3, requires_grad=True)


def test_rebinding_the_global_or_replacing_the_parameter_traces_again():
    global _REBOUND
    lin = torch.nn.Linear(3, 3)

    def fn(x):
        return lin(x) * _REBOUND

    jf = thunder.jit(fn)
    x = torch.randn(3)
    jf(x)
    _REBOUND = torch.randn(3, requires_grad=True)
    lin.weight = torch.nn.Parameter(torch.randn(3, 3))
    actual, expected = jf(x), fn(x)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(
        torch.autograd.grad(actual.sum(), (_REBOUND, lin.weight)),
        torch.autograd.grad(expected.sum(), (_REBOUND, lin.weight)),
    ):
        torch.testing.assert_close(a, e)
    assert thunder.cache_misses(jf) == 2


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_captured_tensor_returned_or_viewed_is_the_tensor_itself(requires_grad):
    w = torch.randn(2, 3, dtype=torch.float64, requires_grad=requires_grad)

    def fn(x):
        v = w.double()  # (w itself: it is float64)
        return v.t(), w, x * 2

    out, expected = thunder.jit(fn)(torch.randn(3)), fn(torch.randn(3))
    assert out[1] is w and expected[1] is w
    assert out[0]._base is w and expected[0]._base is w
    assert out[0].requires_grad == expected[0].requires_grad


def test_a_captured_integer_tensor_updated_in_place_and_returned_is_the_tensor_itself():
    counts = torch.tensor([1, 2, 3])
    ref = counts.clone()

    def fn(x):
        counts.add_(1)
        counts[0] = 7
        return counts, x + counts

    x = torch.ones(3, dtype=torch.int64)
    out = thunder.jit(fn)(x)
    ref.add_(1)
    ref[0] = 7
    assert out[0] is counts
    assert torch.equal(counts, ref) and torch.equal(out[1], x + ref)


def test_a_saved_result_of_a_captured_tensor_updated_in_place_raises_eagers_backward_error():
    w = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)

    def fn(x):
        v = w.amax()  # (amax saves its result for the backward)
        v.abs_()
        return v * x

    x = torch.randn(3, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fn(x).sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        thunder.jit(fn)(x).sum().backward()


def test_a_call_passing_the_captured_tensor_itself_as_the_updated_argument_traces_again():
    buf = torch.zeros(3)

    def fn(x):
        x.add_(1)
        return buf * 2

    jf = thunder.jit(fn)
    torch.testing.assert_close(jf(torch.ones(3)), torch.zeros(3))
    # (now the argument is buf: the update reaches what the function reads, as in eager)
    torch.testing.assert_close(jf(buf), torch.full((3,), 2.0))
    torch.testing.assert_close(buf, torch.ones(3))


def test_an_update_of_a_captured_view_of_an_argument_is_refused_naming_the_line():
    base = torch.zeros(2, 3)
    row = base[0]

    def fn(x):
        x.add_(1)
        return row * 2  # (row is a view of x: the program holds them as two inputs)

    with pytest.raises(Exception, match="shares memory with its input") as info:
        thunder.jit(fn)(base)
    assert __file__ in str(info.value) and "row * 2" in str(info.value)
    torch.testing.assert_close(fn(torch.zeros(2, 3)), torch.full((3,), 0.0))  # (reads of it are fine)
    assert torch.equal(thunder.jit(lambda x: row * x)(base), row * base)
