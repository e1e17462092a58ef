"""The aliasing and mutation record of a compiled program (``thunder.last_aliasing``), against what eager does
to the same arguments: which tensors change, share a storage, are returned themselves, change layout or keep
their autograd history; and how it prints (the computation trace's header, ``thunder.examine``)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import thunder
from thunder.core import prims


def _write_backs(trace) -> list[tuple[str, str]]:
    """(new value, input) of each write-back ``copy_`` in ``trace``, in order."""
    return [(b.args[0].name, b.args[1].name) for b in trace.bound_symbols if b.sym.id == prims.copy_.id]


def test_updates_are_the_inputs_eager_changes_in_the_order_written_back():
    def f(x, y, z):
        x.mul_(2)
        y.add_(z)
        return z * 3

    args = [torch.randn(2, 3) for _ in range(3)]
    before = [a.clone() for a in args]
    eager_args = [a.clone() for a in before]
    f(*eager_args)
    changed_by_eager = {name for name, a, b in zip("xyz", eager_args, before) if not torch.equal(a, b)}
    jf = thunder.jit(f)
    jf(*args)
    record = thunder.last_aliasing(jf)
    assert {u.input for u in record.updates} == changed_by_eager == {"x", "y"}
    trace = thunder.last_traces(jf)[0]
    assert [(u.new_value, u.input) for u in record.updates] == _write_backs(trace)
    assert all(not u.keeps_history and u.layout is None and not u.constant for u in record.updates)
    assert record.shared_storage == () and record.returned_inputs == ()


def test_an_update_autograd_does_not_see_keeps_the_callers_history():
    def f(x, y):
        with torch.no_grad():
            x.add_(1)
        y.mul_(2)
        return x * y

    def make():
        leaf = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
        return leaf * 1, leaf * 2

    ex, ey = make()
    x_node, y_node = ex.grad_fn, ey.grad_fn
    f(ex, ey)
    assert ex.grad_fn is x_node and ey.grad_fn is not y_node  # eager: only the update autograd sees rebases
    jf = thunder.jit(f)
    tx, ty = make()
    x_node = tx.grad_fn
    jf(tx, ty)
    assert tx.grad_fn is x_node
    record = thunder.last_aliasing(jf)
    assert record.updated("x").keeps_history and not record.updated("y").keeps_history


def test_inputs_sharing_a_storage_are_one_group():
    def f(a, b):
        a.add_(1)
        return b * 2

    base = torch.zeros(6)
    a, b = base[:4], base[2:]
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    jf = thunder.jit(f)
    out = jf(a, b)
    eager_base = torch.zeros(6)
    torch.testing.assert_close(out, f(eager_base[:4], eager_base[2:]))
    torch.testing.assert_close(base, eager_base)
    (group,) = thunder.last_aliasing(jf).shared_storage
    assert group.inputs == ("a", "b")
    assert group.storage in [p.name for p in thunder.last_traces(jf)[0].args]


def test_an_input_returned_itself_is_listed():
    def f(x, y):
        return x.add_(1), y + 1

    x = torch.zeros(3)
    assert f(x, torch.zeros(3))[0] is x  # eager returns the very tensor
    jf = thunder.jit(f)
    x = torch.zeros(3)
    assert jf(x, torch.zeros(3))[0] is x
    assert thunder.last_aliasing(jf).returned_inputs == ("x",)


def test_a_layout_change_of_an_input_is_an_update_keeping_its_elements():
    def f(x):
        x.t_()
        return x.sum()

    x = torch.arange(6.0).reshape(2, 3)
    jf = thunder.jit(f)
    jf(x)
    assert x.shape == (3, 2)  # as eager's t_()
    (update,) = thunder.last_aliasing(jf).updates
    assert update.input == "x" and update.layout == "restride" and update.new_value is None


def test_outputs_that_may_be_views_of_inputs_are_listed_with_those_inputs():
    def f(x, y):
        return x.t(), x + y, y[1:]

    x, y = torch.randn(2, 2), torch.randn(2, 2)
    eager = f(x, y)
    assert [o.untyped_storage().data_ptr() for o in eager] == [
        x.untyped_storage().data_ptr(),
        eager[1].untyped_storage().data_ptr(),
        y.untyped_storage().data_ptr(),
    ]
    jf = thunder.jit(f)
    jf(x, y)
    trace = thunder.last_traces(jf)[0]
    outputs = [p.name for p in trace.bound_symbols[-1].flat_args]
    record = thunder.last_aliasing(jf)
    assert record.outputs_aliasing_inputs == ((outputs[0], ("x",)), (outputs[2], ("y",)))
    assert record.updates == ()


def test_the_record_is_the_computation_traces_header():
    def f(x):
        x.mul_(2)
        return x + 1

    jf = thunder.jit(f)
    jf(torch.ones(2))
    record = thunder.last_aliasing(jf)
    lines = str(thunder.last_traces(jf)[0]).splitlines()
    assert lines[1 : 1 + len(record.comment_lines())] == record.comment_lines()
    assert record.comment_lines() == [
        "# Aliasing and mutation:",
        f"#   update 1: input x gets {record.updates[0].new_value}",
    ]


def test_a_program_without_aliasing_or_writes_has_an_empty_record_and_no_header():
    jf = thunder.jit(lambda x: x * 2)
    jf(torch.ones(2))
    record = thunder.last_aliasing(jf)
    assert not record and record.updates == ()
    assert "Aliasing" not in str(thunder.last_traces(jf)[0])


def test_the_record_is_frozen():
    def f(x):
        x.add_(1)
        return x * 2

    jf = thunder.jit(f)
    jf(torch.ones(2))
    record = thunder.last_aliasing(jf)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.updates = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.updates[0].input = "y"


def test_the_backward_trace_has_no_aliasing_header_and_the_forward_keeps_it():
    def f(x):
        x.mul_(3)
        return x * 2

    jf = thunder.jit(f)
    leaf = torch.ones(2, requires_grad=True)
    jf(leaf * 1)
    assert "# Aliasing and mutation:" in str(thunder.last_traces(jf)[-1])
    assert "Aliasing" not in str(thunder.last_backward_traces(jf)[-1])


def test_examine_reports_the_record(capsys):
    def f(x):
        x.add_(1)
        return x * 2

    report = thunder.examine(f, torch.ones(2))
    assert report.matches and report.aliasing.updated("x") is not None
    assert "update 1: input x gets" in capsys.readouterr().out


def test_last_aliasing_before_any_call_is_an_error():
    with pytest.raises(RuntimeError):
        thunder.last_aliasing(thunder.jit(lambda x: x))
