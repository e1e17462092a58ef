"""Errors about the user's program name the user's file, line and source text."""

from __future__ import annotations

import inspect
import os

import pytest
import torch

import thunder

THIS_FILE = os.path.basename(__file__)


def _line_of(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return start + offset
    raise AssertionError(f"{text!r} not in the source of {fn.__qualname__}")


def branch_on_tensor(t):
    if t.sum() > 0:
        return t
    return -t


def item_in_python(t):
    scale = t.sum().item()
    return t * scale


def float_of_tensor(t):
    return t * float(t.max())


def add_mismatched(a, b):
    return a + b


def test_data_dependent_class_is_runtime_error():
    assert issubclass(thunder.DataDependentControlFlowError, RuntimeError)


def test_data_dependent_branch_raises():
    with pytest.raises(thunder.DataDependentControlFlowError):
        thunder.jit(branch_on_tensor)(torch.ones(3))


def test_data_dependent_branch_names_file_line_and_source():
    with pytest.raises(thunder.DataDependentControlFlowError) as info:
        thunder.jit(branch_on_tensor)(torch.ones(3))
    msg = str(info.value)
    line = _line_of(branch_on_tensor, "if t.sum() > 0:")
    assert THIS_FILE in msg
    assert f"line {line}" in msg
    assert "if t.sum() > 0:" in msg


def test_item_raises_naming_the_line():
    with pytest.raises(thunder.DataDependentControlFlowError) as info:
        thunder.jit(item_in_python)(torch.ones(3))
    msg = str(info.value)
    assert THIS_FILE in msg
    assert f"line {_line_of(item_in_python, 'scale = t.sum().item()')}" in msg
    assert "scale = t.sum().item()" in msg
    assert "item" in msg


def test_float_of_tensor_raises_naming_the_line():
    with pytest.raises(thunder.DataDependentControlFlowError) as info:
        thunder.jit(float_of_tensor)(torch.ones(3))
    msg = str(info.value)
    assert THIS_FILE in msg and f"line {_line_of(float_of_tensor, 'float(t.max())')}" in msg


def test_data_dependent_error_in_module_forward_names_forward_line():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if (x > 0).all():
                return x
            return x * 2

    with pytest.raises(thunder.DataDependentControlFlowError) as info:
        thunder.jit(Branchy())(torch.ones(2))
    msg = str(info.value)
    assert f"line {_line_of(Branchy.forward, 'if (x > 0).all():')}" in msg
    assert "if (x > 0).all():" in msg


def test_failed_trace_leaves_no_cache_entry():
    jfn = thunder.jit(branch_on_tensor)
    for _ in range(2):
        with pytest.raises(thunder.DataDependentControlFlowError):
            jfn(torch.ones(3))
    assert thunder.cache_hits(jfn) == 0


def test_shape_mismatch_raises_eagers_exception_type():
    a, b = torch.ones(2, 3), torch.ones(4, 5)
    with pytest.raises(Exception) as eager_info:
        add_mismatched(a, b)
    with pytest.raises(type(eager_info.value)):
        thunder.jit(add_mismatched)(a, b)


def test_shape_mismatch_mentions_sizes():
    a, b = torch.ones(2, 3), torch.ones(4, 5)
    with pytest.raises(RuntimeError) as info:
        thunder.jit(add_mismatched)(a, b)
    msg = str(info.value)
    assert "must match" in msg or "broadcast" in msg


def test_shape_mismatch_notes_the_users_line():
    a, b = torch.ones(2, 3), torch.ones(4, 5)
    with pytest.raises(RuntimeError) as info:
        thunder.jit(add_mismatched)(a, b)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    text = str(info.value) + "\n" + notes
    assert THIS_FILE in text
    assert f"line {_line_of(add_mismatched, 'return a + b')}" in text
    assert "return a + b" in text


def test_matmul_mismatch_raises_eagers_exception_type():
    def fn(a, b):
        return a @ b

    a, b = torch.ones(2, 3), torch.ones(4, 5)
    with pytest.raises(Exception) as eager_info:
        fn(a, b)
    with pytest.raises(type(eager_info.value)):
        thunder.jit(fn)(a, b)


def test_jit_of_non_callable_raises_type_error():
    with pytest.raises(TypeError):
        thunder.jit(3)


def test_data_dependent_errors_show_the_thunderfx_one_line_change():
    def branch(x):
        return x * 2 if x.sum() > 0 else x

    def loop_over_nonzero(x):
        return x[: len(x.nonzero())] if len(x.nonzero()) > 1 else x

    x = torch.randn(4)
    for fn in (branch, loop_over_nonzero):
        with pytest.raises(Exception, match=r'torch\.compile\(model, backend="thunder"\)') as info:
            thunder.jit(fn)(x)
        assert "docs/dynamo.md" in str(info.value)
        torch.testing.assert_close(torch.compile(fn, backend="thunder")(x), fn(x))  # and the change runs it
