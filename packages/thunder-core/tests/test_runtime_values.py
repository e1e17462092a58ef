"""Python values a program computes from tensor data (torch.equal / torch.allclose's bool): thunder.jit returns
eager's value, computed on every call, and refuses Python code that branches or computes on it while tracing,
naming the line."""

from __future__ import annotations

import inspect

import pytest
import torch

import thunder


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _pairs():
    a = torch.tensor([1.0, 2.0, float("nan")])
    return [
        (a, a.clone()),
        (a, a + 1e-7),
        (a, a + 1e-3),
        (a, torch.tensor([1.0, 2.0, 3.0])),
        (a[:2], a[:1]),  # broadcasts for allclose; different shapes for equal
        (torch.ones(2, 3), torch.ones(3)),
    ]


_FNS = {
    "allclose": lambda a, b: torch.allclose(a, b),
    "allclose_nan": lambda a, b: a.allclose(b, rtol=1e-4, atol=0.0, equal_nan=True),
    "equal": lambda a, b: torch.equal(a, b),
    "equal_method": lambda a, b: a.equal(b),
    "in_structure": lambda a, b: (a * 2, {"same": torch.equal(a, b), "close": [torch.allclose(a, b)]}),
}


@pytest.mark.parametrize("name", list(_FNS))
def test_runtime_bool_matches_eager_on_every_call(name):
    fn = _FNS[name]
    jfn = thunder.jit(fn)
    for a, b in _pairs():  # one compiled program per shape; values differ between calls of the same shapes
        try:
            expected = fn(a, b)
        except RuntimeError as e:
            with pytest.raises(type(e)):
                jfn(a, b)
            continue
        actual = jfn(a, b)
        torch.testing.assert_close(actual, expected, equal_nan=True)
        assert type(pytree_leaf(actual)) is type(pytree_leaf(expected))


def pytree_leaf(x):
    if isinstance(x, tuple):
        return pytree_leaf(x[1]["same"])
    return x


def test_runtime_bool_with_inputs_requiring_grad():
    def fn(a, b):
        return (a * b).sum(), torch.allclose(a, b)

    a = torch.randn(4, requires_grad=True)
    for b in (a.detach().clone().requires_grad_(), torch.randn(4, requires_grad=True)):
        expected, actual = fn(a, b), thunder.jit(fn)(a, b)
        assert actual[1] is expected[1]
        torch.testing.assert_close(torch.autograd.grad(actual[0], (a, b)), torch.autograd.grad(expected[0], (a, b)))


def branch_on_equal(a, b):
    if torch.equal(a, b):
        return a
    return b


def not_allclose(a, b):
    return not torch.allclose(a, b)


def int_of_equal(a, b):
    same = torch.equal(a, b)
    return a * int(same)


def add_equal(a, b):
    same = torch.equal(a, b)
    return same + 1


def tensor_of_equal(a, b):
    return torch.tensor(torch.equal(a, b))


def format_allclose(a, b):
    return f"{torch.allclose(a, b)}"


@pytest.mark.parametrize(
    ("fn", "line_text", "what"),
    [
        (branch_on_equal, "if torch.equal", "branch on"),
        (not_allclose, "return not", "branch on"),
        (int_of_equal, "int(same)", "convert to int"),
        (add_equal, "same + 1", "compute with"),
        (tensor_of_equal, "torch.tensor(", "pass to a torch call"),
        (format_allclose, 'f"{', "format"),
    ],
)
def test_python_code_on_a_runtime_bool_is_refused_naming_the_line(fn, line_text, what):
    a = torch.ones(3)
    with pytest.raises(thunder.DataDependentControlFlowError) as info:
        thunder.jit(fn)(a, a.clone())
    msg = str(info.value)
    assert what in msg and ("torch.equal" in msg or "torch.allclose" in msg)
    assert f"line {_line_of(fn, line_text)}" in msg and "test_runtime_values.py" in msg


def test_allclose_refuses_what_eager_refuses():
    a = torch.ones(3)
    for b in (torch.ones(3, dtype=torch.float64), torch.ones(2)):
        with pytest.raises(RuntimeError):
            torch.allclose(a, b)
        with pytest.raises(RuntimeError):
            thunder.jit(torch.allclose)(a, b)


def test_runtime_bool_stays_out_of_torch_compile_regions():
    from thunder.executors.torch_compile import TorchCompileExecutor

    ex = TorchCompileExecutor(min_region_numel=0)
    if ex.unavailable_reason() is not None:
        pytest.skip(ex.unavailable_reason())

    def fn(a, b):
        c = (a * 2).sin() + b
        return c.cos() * 3, torch.allclose(c, b), torch.equal(a, b)

    a = torch.randn(8, 8)
    jfn = thunder.jit(fn, executors=[ex, *thunder.get_default_executors()], fusion="wait")
    for b in (torch.randn(8, 8), a.clone()):
        actual, expected = jfn(a, b), fn(a, b)
        torch.testing.assert_close(actual[0], expected[0])
        assert actual[1:] == expected[1:]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.complex64])
def test_item_returns_eager_number_on_every_call(dtype):
    def fn(t):
        return t.sum().item() if dtype is not torch.bool else t.any().item()

    jfn = thunder.jit(fn)
    for values in ([1, 2, 3], [0, 0, 0], [5, -1, 2]):
        t = torch.tensor(values).to(dtype)
        actual, expected = jfn(t), fn(t)
        assert type(actual) is type(expected) and actual == expected


def test_item_beside_a_differentiated_output():
    def fn(t):
        return (t * 2).sum(), t.max().item()

    t = torch.randn(4, requires_grad=True)
    (a_out, a_item), (e_out, e_item) = thunder.jit(fn)(t), fn(t)
    assert a_item == e_item
    torch.testing.assert_close(torch.autograd.grad(a_out, t), torch.autograd.grad(e_out, t))


def test_item_of_many_elements_is_eagers_error():
    t = torch.ones(3)
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        t.item()
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        thunder.jit(lambda t: t.item())(t)


def scale_by_item(t):
    scale = t.sum().item()
    return t * scale


def arange_of_item(t):
    n = t.long().max().item()
    return torch.arange(n)


@pytest.mark.parametrize(("fn", "use_text"), [(scale_by_item, "t * scale"), (arange_of_item, "torch.arange(n)")])
def test_item_used_as_a_number_names_its_use(fn, use_text):
    with pytest.raises(thunder.DataDependentControlFlowError) as info:
        thunder.jit(fn)(torch.ones(3))
    msg = str(info.value)
    assert f"line {_line_of(fn, use_text)}" in msg and "test_runtime_values.py" in msg
    if fn is scale_by_item:  # (PyTorch's argument parser refuses the other before thunder sees the call)
        assert f"line {_line_of(fn, '.item()')}" in msg  # where the value came from
