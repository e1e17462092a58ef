"""The generated prologue: readable Python that checks a call's inputs and calls the computation."""

from __future__ import annotations

import re

import pytest
import torch

import thunder


def add(a, b):
    return a + b


def _prologue_src(jfn) -> str:
    return str(thunder.last_prologue_traces(jfn)[-1])


def test_prologue_is_valid_python():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    src = _prologue_src(jfn)
    compile(src, "<prologue>", "exec")


def test_prologue_has_the_users_signature_and_calls_computation():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    lines = [line.strip() for line in _prologue_src(jfn).splitlines()]
    assert any(line.startswith("def ") and line.endswith("(a, b):") for line in lines)
    assert "return computation(a, b)" in lines


def test_prologue_checks_inputs():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    src = _prologue_src(jfn)
    check_lines = [line for line in src.splitlines() if "return MISS" in line]
    assert check_lines, "the prologue checks nothing"
    # both tensors are checked (the tensor guard's line reads them from a tuple built just before it)
    lines = src.splitlines()
    guarded = [lines[i - 1] for i, line in enumerate(lines) if "_tensor_guard" in line and "return MISS" in line]
    checked = {name for line in check_lines + guarded for name in re.findall(r"\b[ab]\b", line)}
    assert checked == {"a", "b"}


def test_prologue_checks_python_values():
    jfn = thunder.jit(lambda x, n: x * n)
    jfn(torch.ones(2), 3)
    src = _prologue_src(jfn)
    assert any("n" in line and "3" in line and "return MISS" in line for line in src.splitlines())


def test_prologue_rejects_what_it_was_not_traced_for():
    """A call whose inputs differ is not run by the old computation: results stay equal to eager."""
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    a, b = torch.ones(2, dtype=torch.int64), torch.full((2,), 2, dtype=torch.int64)
    out = jfn(a, b)
    assert out.dtype == torch.int64
    torch.testing.assert_close(out, add(a, b))


def test_too_many_arguments_raises_type_error_naming_function():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError) as thunder_info:
        jfn(torch.ones(2), torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError) as eager_info:
        add(torch.ones(2), torch.ones(2), torch.ones(2))
    assert "add()" in str(thunder_info.value)
    assert str(thunder_info.value) == str(eager_info.value)


def test_too_few_arguments_raises_type_error_naming_function():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError) as info:
        jfn(torch.ones(2))
    msg = str(info.value)
    assert "add()" in msg and "'b'" in msg


def test_too_few_arguments_on_first_call():
    jfn = thunder.jit(add)
    with pytest.raises(TypeError, match="add") as info:
        jfn(torch.ones(2))
    assert "'b'" in str(info.value)


def test_unexpected_keyword_raises_type_error():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError) as info:
        jfn(torch.ones(2), c=torch.ones(2))
    assert "'c'" in str(info.value)
    assert "add()" in str(info.value)


def test_module_wrong_arguments_raise_type_error():
    class TwoInputs(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    tm = thunder.jit(TwoInputs())
    with pytest.raises(TypeError, match="forward"):
        tm(torch.ones(2))


def test_ints_after_tensors_retrace_like_eager():
    jfn = thunder.jit(add)
    torch.testing.assert_close(jfn(torch.ones(2), torch.ones(2)), torch.full((2,), 2.0))
    out = jfn(1, 2)
    assert out == 3 and type(out) is int
    assert thunder.cache_misses(jfn) == 2


def test_strings_after_tensors_retrace_like_eager():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    assert jfn("s", "t") == add("s", "t") == "st"


def test_tensor_and_python_number_after_two_tensors():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    a = torch.randn(2)
    torch.testing.assert_close(jfn(a, 3), add(a, 3))


def test_list_where_tensor_was_traced_raises_like_eager():
    jfn = thunder.jit(add)
    jfn(torch.ones(2), torch.ones(2))
    with pytest.raises(TypeError) as eager_info:
        add([1.0, 2.0], torch.ones(2))
    with pytest.raises(type(eager_info.value)):
        jfn([1.0, 2.0], torch.ones(2))


def test_last_prologue_traces_before_call_raises():
    jfn = thunder.jit(add)
    with pytest.raises(RuntimeError, match="called"):
        thunder.last_prologue_traces(jfn)


def test_prologue_locals_do_not_shadow_arguments_of_the_same_name():
    def f(_tensors, __tensors, x):
        return x + _tensors * __tensors

    jfn = thunder.jit(f)
    args = torch.ones(2), torch.full((2,), 2.0), torch.arange(2.0)
    torch.testing.assert_close(jfn(*args), f(*args))
    args = torch.ones(3), torch.full((3,), 3.0), torch.arange(3.0)
    torch.testing.assert_close(jfn(*args), f(*args))
