"""Outputs of view ops returning several views (``x.unbind(0)``, ``x.split(2)`` ...) and the views made of them:
eager refuses to update them in place with grad, and refuses their history once their base (or another view of it)
was updated in place."""

from __future__ import annotations

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten, tree_map
from thunder.tracing.errors import describe_location, user_frame
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import view_of

__all__ = ["MULTI_VIEW_OPS", "mark_multi_views", "note_rebased_multi_view", "rebased_multi_view", "refuse_rebased_use"]

# view ops returning several views: eager refuses in-place updates of those views with grad (not tensor_split and
# hsplit/vsplit/dsplit: eager makes them of one slice each, ordinary views)
MULTI_VIEW_OPS = frozenset("unbind split chunk split_with_sizes unflatten_dense_tensors".split())


def _eager_name(name: str, args) -> str:
    """The name eager's messages give the view op: its autograd node's (chunk is a split, split by sizes
    split_with_sizes)."""
    if name == "split_with_sizes" or (name == "split" and len(args) > 1 and isinstance(args[1], (list, tuple))):
        return "SplitWithSizes"
    if name in ("split", "chunk"):
        return "Split"
    return name[:1].upper() + name[1:]


def mark_multi_views(func, out, args=()) -> None:
    """Marks the outputs of ``func`` (``x.unbind(0)``, ``x.split(2)`` ...) as views eager refuses to update in
    place with grad (``_refuse_update_of_grad_leaf``), with the version count of their base then (an update of
    the base after it makes eager refuse their history: ``note_rebased_multi_view``)."""
    name = getattr(func, "__name__", None) or ""
    if type(out) is TracingTensor and args and type(args[0]) is TracingTensor and args[0]._tt_unrecorded_layout:
        if view_of(out) is not None:  # (a view of a tensor relaid out under no_grad: its gradient goes there too)
            out._tt_unrecorded_layout = args[0]._tt_unrecorded_layout
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
            o._tt_multi_view = (_eager_name(name, args), i, count, made)


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


def _message(name: str, index: int) -> str:
    return (
        f"Output {index} of {name} is a view and its base or another view of its base has been modified inplace. "
        "This view is the output of a function that returns multiple views. Such functions do not allow the output "
        "views to be modified inplace. You should replace the inplace operation by an out-of-place one."
    )


_REBASED_REFUSAL = "its base or another view of its base has been modified inplace"


def refuse_rebased_use(tracer, func, args, kwargs) -> None:
    """Raises eager's error, naming the line, where ``func`` reads the history of an argument that is an output of
    a view op returning several views (``x.unbind(0)[0]``) requiring grad whose base was updated in place since (and
    makes the backward raise, naming the line, where a gradient comes through such a read of a tensor whose layout
    was changed in place under no_grad: ``note_unrecorded_layout_change``):
    eager's autograd refuses it where the call records a gradient (``v.t()``, ``v * 2`` under grad mode; not
    ``v > 0``, ``v.detach()``). Which calls those are is asked of PyTorch: ``func`` runs on meta tensors, that
    argument replaced by such an output of its own sizes, rebased the same way."""
    tracer.multi_view_read = False
    if not torch.is_grad_enabled() or not callable(func) or type(func).__name__ == "Symbol":
        return
    rebased = [
        a
        for a in tree_flatten((args, kwargs))[0]
        if type(a) is TracingTensor
        and ((rebased_multi_view(a) and a._thunder_proxy.requires_grad) or a._tt_unrecorded_layout is not None)
    ]
    if not rebased:
        return
    from thunder.tracing.views import _to_shadows, shadow

    with torch._C.DisableTorchFunction():
        probes = {id(a): _rebased_probe(shadow(a)) for a in rebased}
        meta_args, meta_kwargs = tree_map(
            lambda a: probes[id(a)] if id(a) in probes else _to_shadows(a) if type(a) is TracingTensor else a,
            (args, kwargs),
        )
        try:
            func(*meta_args, **meta_kwargs)
        except RuntimeError as e:
            if _REBASED_REFUSAL not in str(e):
                return
        except Exception:  # noqa: BLE001  (the traced call reports its own errors)
            return
        else:
            return
    frame = user_frame(4)
    if all(rebased_multi_view(a) is False for a in rebased):
        # (relaid out without grad: the forward is eager's, a gradient through this read is not)
        for a in rebased:
            message = (
                "thunder.jit does not give a gradient through a tensor whose layout was changed in place without grad "
                f"({a._tt_unrecorded_layout}: eager's backward gives its history the gradient of the new layout as "
                "it is, which thunder does not reproduce); change the layout with grad enabled, or of a detached tensor"
            )
            tracer.saves.raising.append((a._thunder_proxy, message, (frame, frame.f_lineno if frame else None)))
        return
    name, index = next(a for a in rebased if rebased_multi_view(a))._tt_multi_view[:2]
    where = describe_location(frame)
    raise RuntimeError(f"{_message(name, index)}\n  {where}")


def _rebased_probe(like: torch.Tensor) -> torch.Tensor:
    """An output of ``unbind`` with ``like``'s sizes, strides and dtype on meta, requiring grad, whose base was
    updated in place after it was made."""
    base = torch.empty((1, *like.shape), dtype=like.dtype, device="meta", requires_grad=True).clone()
    probe = base.unbind(0)[0]
    base.mul_(1)
    return probe
