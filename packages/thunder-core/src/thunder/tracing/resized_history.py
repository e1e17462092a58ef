"""A tensor requiring grad resized below autograd: an ``out=`` tensor of another shape than the result, under
``no_grad`` (``torch.add(x[0], x[0], out=o)`` of an ``o`` of shape ``[2, 3]``).

Eager's kernel resizes ``o`` in place and autograd records nothing: ``o`` keeps its ``grad_fn``, whose input is of
the shape ``o`` had when that node was made (resizes after it change nothing there). A gradient of ``o``'s shape
where it is read reaching that node is summed back to the node's shape where that shape expands to it (``[3]`` to
``[2, 3]``), and is eager's error otherwise ("returned an invalid gradient ... expected shape compatible with ..."),
raised by the backward once a gradient comes through. The program does the same: the new value keeps the node's
gradient path (``keep_grad_of``, whose rule sums the gradient back), and where the shapes do not expand the backward
raises eager's error, naming the line of the resize. A view resized so is another matter: eager makes its history
anew from its base's, through its new layout, as thunder re-derives it.
"""

from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import hints, known
from thunder.tracing.autograd_function import _no_grad_update
from thunder.tracing.errors import user_frame

__all__ = ["expandable", "resized_without_grad", "note_resized_root"]


def expandable(shape, to) -> bool:
    """Whether a tensor of ``shape`` expands to ``to`` (autograd's test of a gradient against its input's shape)."""
    if len(shape) > len(to):
        return False
    return all(known(s == 1) or known(s == t) for s, t in zip(reversed(tuple(shape)), reversed(tuple(to))))


def _origins(tracer) -> dict:
    """{name of a value a resize without grad gave: the value whose history it keeps} for ``tracer``'s program."""
    origins = getattr(tracer, "resize_origins", None)
    if origins is None:
        origins = tracer.resize_origins = {}
    return origins


def _history(tracer, value: TensorProxy) -> TensorProxy:
    """The value whose autograd node ``value`` still has: through the updates made without grad since the last
    resize (each ``keep_grad_of``), the value before the first of an unbroken run of resizes."""
    origins = _origins(tracer)
    producers = {o.name: b for b in tracer.trace.bound_symbols for o in b.flat_outs if isinstance(o, TensorProxy)}
    v = value
    while True:
        if v.name in origins:
            return origins[v.name]
        b = producers.get(v.name)
        if b is None or b.sym.id != "keep_grad_of" or not isinstance(b.args[0], TensorProxy):
            return value
        v = b.args[0]


def _raising_entry(shape, new_shape, value: TensorProxy, frame) -> tuple:
    old, new = list(hints(tuple(shape))), list(hints(tuple(new_shape)))
    message = (
        f"invalid gradient - got {new} but expected shape compatible with {old}: a tensor that requires grad was "
        f"resized under no_grad (an out= tensor) from shape {old} to {new}, and a gradient reaches the history it "
        "had before"
    )
    return value, message, (frame, frame.f_lineno if frame is not None else None)


def resized_without_grad(tracer, old: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``new``, the values of a tensor formerly ``old`` that was resized under ``no_grad`` to ``new``'s shape: with
    the gradient path ``old`` had, as eager keeps it; a backward that raises eager's error where a gradient comes
    through it and the shape of that path's node does not expand to ``new``'s."""
    history = _history(tracer, old)
    value = _no_grad_update(tracer.trace, history, new)
    if history.requires_grad:
        _origins(tracer)[value.name] = history
        if not expandable(history.shape, new.shape):
            tracer.saves.raising.append(_raising_entry(history.shape, new.shape, value, user_frame(2)))
    return value


def note_resized_root(tracer, wrapper, old: TensorProxy, root_value: TensorProxy) -> None:
    """``wrapper``, formerly ``old``, resized under ``no_grad`` within its storage, is now a view of its former
    elements, ``root_value``, and is returned as such: the backward raises eager's error where a gradient comes
    through them while the shape ``wrapper`` has at the program's end does not expand to that of ``old``'s node."""
    history = _history(tracer, old)
    frame = user_frame(2)

    def check():
        shape = wrapper._tt_value.shape
        if expandable(history.shape, shape):
            return None
        return _raising_entry(history.shape, shape, root_value, frame)

    tracer.saves.raising_at_end.append(check)
