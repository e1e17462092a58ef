"""Outputs of view ops returning several views (``x.unbind(0)``, ``x.split(2)`` ...) and the views made of them:
eager refuses to update them in place with grad, and refuses their history once their base (or another view of it)
was updated in place."""

from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.tracing.errors import user_frame
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import view_of

__all__ = ["MULTI_VIEW_OPS", "mark_multi_views", "note_rebased_multi_view", "rebased_multi_view"]

# view ops returning several views: eager refuses in-place updates of those views with grad
MULTI_VIEW_OPS = frozenset(
    "unbind split chunk split_with_sizes tensor_split hsplit vsplit dsplit unflatten_dense_tensors".split()
)


def mark_multi_views(func, out, args=()) -> None:
    """Marks the outputs of ``func`` (``x.unbind(0)``, ``x.split(2)`` ...) as views eager refuses to update in
    place with grad (``_refuse_update_of_grad_leaf``), with the version count of their base then (an update of
    the base after it makes eager refuse their history: ``note_rebased_multi_view``)."""
    name = getattr(func, "__name__", None) or ""
    if type(out) is TracingTensor:  # a view of such an output is one too for eager (its creation meta propagates)
        if args and type(args[0]) is TracingTensor and args[0]._tt_multi_view and view_of(out) is not None:
            out._tt_multi_view = (name[:1].upper() + name[1:], 0, *args[0]._tt_multi_view[2:])
        return
    if name not in MULTI_VIEW_OPS or type(out) is not tuple:
        return
    from thunder.tracing.saved_versions import version_count

    count = version_count(args[0]) if args else None
    frame = user_frame(3)
    made = (frame, frame.f_lineno if frame is not None else None)
    for i, o in enumerate(out):
        if type(o) is TracingTensor and (o._tt_view is not None or o._tt_pending is not None):
            o._tt_multi_view = (name[0].upper() + name[1:], i, count, made)


def rebased_multi_view(w: TracingTensor) -> bool:
    """Whether ``w`` is an output of a view op returning several views whose base (or another view of it) was
    updated in place since (eager refuses its history then)."""
    from thunder.tracing.saved_versions import version_count

    multi = w._tt_multi_view
    return multi is not None and multi[2] is not None and version_count(w) != multi[2]


def note_rebased_multi_view(w: TracingTensor, value: TensorProxy) -> None:
    """``w``, an output of a view op returning several views that requires grad, re-derived as ``value`` after its
    base or another view of it was updated in place: eager refuses its history (the error comes where a gradient
    needs it), so the program's backward raises eager's error where a gradient reaches ``value``."""
    name, index, _, made = w._tt_multi_view
    tracer = w._tt_owner
    if not rebased_multi_view(w) or not value.requires_grad or tracer is None:
        return
    frame = user_frame(3)
    if frame is None or frame.f_code.co_filename.startswith("<thunder"):  # (read by the step after the call)
        frame = made[0]
    message = (
        f"Output {index} of {name} is a view and its base or another view of its base has been modified inplace. "
        "This view is the output of a function that returns multiple views. Such functions do not allow the output "
        "views to be modified inplace. You should replace the inplace operation by an out-of-place one."
    )
    tracer.saves.raising.append((value, message, (frame, frame.f_lineno if frame is not None else None)))
