"""Eager's check of the tensors autograd saved for backward: one updated in place after it was saved (with grad or
under ``no_grad``, its values or its layout: ``y = x.exp(); y.mul_(2)``) makes eager's backward raise "one of the
variables needed for gradient computation has been modified by an inplace operation".

A compiled program keeps the values it needs for its own backward, so it would compute a gradient there. The tracer
notes each differentiable call with the version counts (``version_counters``) of its tensors; at the program's end,
for the calls one of whose tensors was updated since, it asks eager which tensors the call saves (the call run once
on meta tensors, or zero-filled CPU ones for an op without a meta kernel, its autograd nodes' ``_saved_*``
attributes read; the answer cached per op and argument signature)
and lists those whose saved tensors were updated. The forward-backward split keeps those whose node the backward reaches, and the program's backward
then raises eager's error, naming the user's lines, where eager's would.
"""

from __future__ import annotations

import math
import re

import torch

from thunder.core.symbolic import hint, hints
from thunder.tracing.tracing_tensor import TracingTensor

__all__ = ["MODIFIED_IN_PLACE", "StaleSaves", "note_function_saves", "note_saved", "version_count"]

# eager's message for a saved tensor updated in place after it was saved (thunder's for it starts alike)
MODIFIED_IN_PLACE = "one of the variables needed for gradient computation has been modified by an inplace operation"

_RESULT = re.compile(r"_saved_result(\d*)$")
_MAX_NODES = 64
# (func, argument signature) -> (indices of the flat tensor arguments saved, indices of the outputs saved)
_probe_cache: dict = {}


class StaleSaves:
    """The saved stand-ins of the calls traced so far: (stand-in, its count when saved, node, what, where)."""

    def __init__(self) -> None:
        self.entries: list[tuple] = []
        # (what saved them, [(stand-in, its count when saved)], node, where): a Function's ctx.save_for_backward
        self.known: list[tuple] = []
        # (node, eager's error, where): updates whose node's backward raises in eager whatever comes after them
        self.raising: list[tuple] = []
        # callables giving such an entry, or None, from what the program did by its end (resized_history.py)
        self.raising_at_end: list = []

    def stale(self) -> list[tuple[str, str, type[Exception]]]:
        """(name of the node's output, eager's error message, its exception type) for each call whose saved tensor
        was updated since, or whose backward eager does not have.
        Which tensors a call saves is asked of eager only for the calls one of whose tensors was updated."""
        from thunder.tracing.errors import describe_location

        out = []
        seen = set()
        self.raising += [e for e in (check() for check in self.raising_at_end) if e is not None]
        self.raising_at_end = []
        for node, message, where in self.raising:
            if node.name not in seen:
                seen.add(node.name)
                # (eager's error, or thunder's own refusal of a gradient it would not compute as eager does)
                also = "" if message.startswith("thunder.jit") else " (eager's backward raises this too)"
                out.append((node.name, f"{message}{also}\n  {describe_location(*where)}", RuntimeError))
        for saver, saved, node, where in self.known:
            node = node.name
            stale = next((i for i, (w, c) in enumerate(saved) if _count(w) != c), None)
            if node in seen or stale is None:
                continue
            seen.add(node)
            out.append(
                (
                    node,
                    f"{MODIFIED_IN_PLACE}: "
                    f"tensor {stale} that {saver} saved for backward (ctx.save_for_backward) was updated in place "
                    f"after the call (eager's backward raises this too)\n  {describe_location(*where)}",
                    RuntimeError,
                )
            )
        for func, args, kwargs, flat, spec, outs, counts, node, where in self.entries:
            node = node.name  # (read now: the user's variable name may have renamed it since)
            if node in seen:
                continue
            missing = _missing_derivative(func, args, kwargs, flat, spec)
            if missing is not None:  # (x // y: eager's backward raises there; thunder's rule would give zeros)
                seen.add(node)
                error, message = missing
                where_text = describe_location(*where)
                out.append((node, f"{message} (eager's backward raises this too)\n  {where_text}", error))
                continue
            tensors = flat + outs
            if all(_count(w) == c for w, c in zip(tensors, counts)):
                continue
            if all(_settled_count(w) == c for w, c in zip(tensors, counts)):
                continue
            answer = _probe(func, args, kwargs, flat, spec)
            if not answer:
                continue
            saved = [(flat[i], counts[i], f"argument {i}") for i in answer[0]]
            saved += [(outs[i], counts[len(flat) + i], "result") for i in answer[1] if i < len(outs)]
            stale = next((what for w, c, what in saved if _settled_count(w) != c), None)
            if stale is None:
                continue
            seen.add(node)
            frame, lineno = where
            func_name = getattr(func, "__name__", str(func))
            out.append(
                (
                    node,
                    f"{MODIFIED_IN_PLACE}: "
                    f"the {stale} that {func_name} saved for its gradient was updated in place after the call (eager's "
                    f"backward raises this too)\n  {describe_location(frame, lineno)}",
                    RuntimeError,
                )
            )
        return out


def version_count(w) -> int:
    """Eager's bumps of the stand-in ``w``'s version counter while tracing (0 for anything else)."""
    return _count(w)


def _count(w) -> int:
    return _bumps(w) if type(w) is TracingTensor else 0


def _bumps(w: TracingTensor) -> int:
    """Eager's bumps of ``w``'s version counter while tracing (its own, or the one of the tensor it views)."""
    c = w._tt_counter
    if c is not None:
        return c[0]
    view = w._tt_view
    if view is None and w._tt_pending is None:
        return 0  # (no view: a reshape or flatten that copied has a counter of its own, not bumped yet)
    root = view[0] if view is not None else (w._tt_counter_of or (None,))[0]  # (a view whose shadow is pending)
    if root is not None and root._tt_counter is not None:
        return root._tt_counter[0]
    return 0


def _settled_count(w) -> int:
    """``_count(w)`` once whether ``w`` is a view is known (its pending shadow made: a reshape may have copied)."""
    if type(w) is TracingTensor and w._tt_pending is not None:
        from thunder.tracing.views import view_of

        view_of(w)
    return _count(w)


def _settle_if_guessed(w) -> None:
    """Makes the pending shadow of ``w`` now if its count would be guessed from a tensor it may view that an update
    already reached (the guess is right for a view, the count of its own, 0, for a copy)."""
    if type(w) is TracingTensor and w._tt_pending is not None and w._tt_counter is None and _bumps(w) > 0:
        from thunder.tracing.views import view_of

        view_of(w)


def _flat_tensors(args) -> list[TracingTensor]:
    flat = []
    for a in args:
        if type(a) is TracingTensor:
            flat.append(a)
        elif isinstance(a, (list, tuple)):
            flat.extend(x for x in a if type(x) is TracingTensor)
    return flat


def _spec(w: TracingTensor, p=None) -> tuple:
    """What the probe's meta stand-in of ``w`` (whose value is the proxy ``p``, by default its current one) is made
    from (read when the call is traced): its sizes, dtype, whether it requires grad, and its strides where the tracer
    knows them already (an input's, a view's: eager's matmul folds a transposed batch through a copy, which it then
    saves instead of the batch), else None (contiguous)."""
    p = w._thunder_proxy if p is None else p
    # (symbolic sizes by the values they had in the traced call: which tensors a call saves does not depend on them)
    shape = hints(p.shape)
    m = w._tt_meta if w._tt_meta is not None or w._tt_layout_of is None else _input_shadow(w)
    strides = tuple(m.stride()) if m is not None and tuple(m.shape) == tuple(shape) else None
    return shape, p.dtype.torch_dtype, bool(p.requires_grad) and p.dtype.kind in ("float", "complex"), strides


def _input_shadow(w: TracingTensor):
    from thunder.tracing.views import input_shadow

    return input_shadow(w)


def _stand_in(spec: tuple, device: str = "meta") -> torch.Tensor:
    """A tensor of ``spec`` (sizes, dtype, requires_grad, strides) on ``device``: zeros (its values decide nothing
    asked here)."""
    shape, dtype, requires_grad, strides = spec
    if strides is None or 0 in shape:
        return torch.zeros(shape, dtype=dtype, device=device).requires_grad_(requires_grad)
    span = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
    base = torch.zeros(span, dtype=dtype, device=device)
    return base.as_strided(shape, strides).requires_grad_(requires_grad)


def _replace(x, metas: dict):
    if type(x) is TracingTensor:
        return metas[id(x)]
    if type(x) is torch.SymInt:
        return hint(x)
    if isinstance(x, (list, tuple)) and any(type(y) in (TracingTensor, torch.SymInt) for y in x):
        return type(x)(_replace(y, metas) for y in x)
    return x


def _key(x):
    if type(x) is TracingTensor:
        return "T"  # (its sizes, dtype and flag are in the spec)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, *(_key(y) for y in x))
    if isinstance(x, dict):
        return ("d", *((k, _key(v)) for k, v in x.items()))
    if isinstance(x, torch.Tensor):
        raise TypeError  # (a constant tensor: not cached)
    hash(x)
    return x


def _probe(func, args, kwargs, flat: list[TracingTensor], spec: list[tuple]):
    """(saved flat argument indices, saved output indices) of ``func`` in eager, or None if unknown."""
    try:
        # (with which arguments are one tensor: x.mul_(x) saves what x.mul_(y) does not)
        same = tuple(next(j for j, v in enumerate(flat) if v is w) for w in flat)
        key = (func, tuple(spec), same, _key(args), _key(kwargs))
    except TypeError:
        key = None
    if key is not None and key in _probe_cache:
        return _probe_cache[key]
    answer = None
    # (on meta tensors; an op with no meta kernel, masked_select inside combinations, on zero-filled CPU tensors:
    # which tensors a call saves does not depend on their values)
    for device in ("meta", "cpu"):
        try:
            with torch._C.DisableTorchFunction(), torch.enable_grad():
                # (not leaves: an in-place op, relu_, may update one of them)
                metas = {id(w): _non_leaf(_stand_in(sp, device)) for w, sp in zip(flat, spec)}
                before = {id(m.grad_fn) for m in metas.values() if m.grad_fn is not None}
                margs = tuple(_replace(a, metas) for a in args)
                mkwargs = {k: _replace(v, metas) for k, v in kwargs.items()}
                mout = func(*margs, **mkwargs)
            answer = _saved_by(mout, [metas[id(w)] for w in flat], before)
            break
        except NotImplementedError:
            continue
        except Exception:
            break
    if key is not None:
        _probe_cache[key] = answer
    return answer


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage()._cdata == b.untyped_storage()._cdata


def _non_leaf(m: torch.Tensor) -> torch.Tensor:
    return m.clone() if m.requires_grad else m


def _missing_derivative(
    func, args, kwargs, flat: list[TracingTensor], spec: list[tuple]
) -> tuple[type[Exception], str] | None:
    """Eager's error (its type and message) where its autograd has no derivative for ``func`` (its node is
    ``NotImplemented``: floor_divide, heaviside, a RuntimeError; an in-place op whose node's backward raises:
    x.acosh_(), a NotImplementedError), else None. Asked once per function and argument dtypes (on meta tensors; the error the meta node's
    backward raises)."""
    key = (func, tuple(sp[1:3] for sp in spec))  # (the dtypes and flags decide it: an int x // y has no node)
    try:
        return _missing_cache[key]
    except KeyError:
        pass
    except TypeError:
        return None
    message = _missing_derivative_on(func, args, kwargs, flat, spec, "meta")
    if message is _UNKNOWN and all(math.prod(sp[0]) <= _SMALL for sp in spec):
        # (no meta kernel: unique's result's size depends on the values) the same asked of small zeros on the CPU
        generator = torch.default_generator
        state = generator.get_state()
        try:
            message = _missing_derivative_on(func, args, kwargs, flat, spec, "cpu")
        finally:
            generator.set_state(state)
    if message is _UNKNOWN:  # (a constant tensor among the arguments, no kernel: not known, and not kept)
        return None
    _missing_cache[key] = message
    return message


def _runs_opaquely(func) -> bool:
    """Whether thunder runs ``func`` as PyTorch's own call (no torch-language symbol, so no gradient rule of its own
    where eager has none): the calls whose node's backward is asked (a symbol's rule answers for the others)."""
    from thunder.torch.registry import torch_to_thunder

    try:
        return func not in torch_to_thunder
    except TypeError:  # (an unhashable callable)
        return True


_UNKNOWN = object()
_DIFFERENTIABLE_NODES: set[str] = set()  # the kinds of autograd node whose backward ran (on meta or small tensors)
_SMALL = 4096  # (the most elements of an argument the CPU question is asked with)


def _missing_derivative_on(func, args, kwargs, flat, spec, device: str):
    message = None
    try:
        with torch._C.DisableTorchFunction(), torch.enable_grad():
            leaves = {id(w): _stand_in(sp, device) for w, sp in zip(flat, spec)}
            metas = {k: _non_leaf(m) for k, m in leaves.items()}
            mout = func(*(_replace(a, metas) for a in args), **{k: _replace(v, metas) for k, v in kwargs.items()})
            outs = mout if isinstance(mout, (tuple, list)) else (mout,)
            node = next((o for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
            # (an in-place op's node may be a real one whose backward raises: x.acosh_()'s AcoshBackward1; a node
            # eager declares but whose backward raises: unique's Unique2Backward0, asked once per kind of node)
            kind = type(node.grad_fn).__name__ if node is not None else None
            asked = kind == "NotImplemented" or _in_place(func)
            if node is not None and (asked or (kind not in _DIFFERENTIABLE_NODES and _runs_opaquely(func))):
                try:
                    # (to the leaves the arguments are made from: an in-place op's target is its output)
                    torch.autograd.grad(node, [m for m in leaves.values() if m.requires_grad], torch.ones_like(node))
                    if not _in_place(func):
                        _DIFFERENTIABLE_NODES.add(kind)
                except RuntimeError as e:  # (NotImplementedError is one)
                    # (not a meta kernel missing: the derivative itself)
                    if type(node.grad_fn).__name__ == "NotImplemented" or re.search(
                        r"derivative for .* not impl", str(e)
                    ):
                        message = type(e), str(e).split("\n")[0]
    except Exception:
        return _UNKNOWN
    return message


_missing_cache: dict = {}


def _in_place(func) -> bool:
    name = getattr(func, "__name__", "")
    return name.endswith("_") and not name.startswith("_")


def _saved_by(mout, meta_args: list[torch.Tensor], before: set = frozenset()):
    outs = mout if isinstance(mout, (tuple, list)) else (mout,)
    top = next((o.grad_fn for o in outs if isinstance(o, torch.Tensor) and o.grad_fn is not None), None)
    if top is None or id(top) in before:  # (the call recorded nothing: it returned its argument)
        return None
    saved_args, saved_outs = set(), set()
    seen, todo = set(), [top]
    while todo and len(seen) < _MAX_NODES:
        node = todo.pop()
        if node is None or id(node) in seen or type(node).__name__ == "AccumulateGrad":
            continue
        seen.add(id(node))
        for name in dir(node):
            if not name.startswith("_saved_") or name.startswith("_saved_sym"):
                continue
            m = _RESULT.match(name)
            if m is not None and node is top:
                saved_outs.add(int(m.group(1) or 0))
                continue
            try:
                value = getattr(node, name)
            except RuntimeError as e:
                # (x.remainder_(x): what it saved was its target, which it then updated: eager's backward raises)
                if node is top and "modified by an inplace operation" in str(e):
                    saved_args.update(i for i, a in enumerate(meta_args) if a is meta_args[0])
                continue
            except Exception:
                continue
            for v in value if isinstance(value, (tuple, list)) else (value,):
                if not isinstance(v, torch.Tensor):
                    continue
                found = False
                for i, a in enumerate(meta_args):
                    if v is a or v._base is a:
                        saved_args.add(i)
                        found = True
                if node is top and not found:
                    # (an output saved under a name of its own, the flash kernel's ``_saved_output``: its storage)
                    saved_outs.update(j for j, o in enumerate(outs) if isinstance(o, torch.Tensor) and _shares(v, o))
        todo.extend(f for f, _ in node.next_functions)
    return tuple(sorted(saved_args)), tuple(sorted(saved_outs))


def note_function_saves(saves: StaleSaves, saver: str, saved, node) -> None:
    """Notes the tensors a ``torch.autograd.Function``'s forward saved (``saved``; ``node``: a proxy of its
    outputs) with their version counts now, for :meth:`StaleSaves.stale`."""
    from thunder.tracing.errors import user_frame

    tensors = [(w, _count(w)) for w in saved if type(w) is TracingTensor]
    if not tensors:
        return
    frame = user_frame(3)
    saves.known.append((saver, tensors, node, (frame, frame.f_lineno if frame is not None else None)))


def _counter_of(w):
    """The version counter ``w`` shares (its own, or the one of the tensor it views), or None."""
    if type(w) is not TracingTensor:
        return None
    if w._tt_counter is not None:
        return w._tt_counter
    view = w._tt_view
    root = view[0] if view is not None else (w._tt_counter_of or (None,))[0]
    return root._tt_counter if root is not None else None


_OVERLAP_ERROR = (
    "unsupported operation: more than one element of the written-to tensor refers to a single memory location. "
    "Please clone() the tensor before performing the operation."
)


# in-place ops that change a tensor's sizes, strides or flags, not its elements (eager records no CopySlices)
_LAYOUT_ONLY = frozenset(
    (
        "t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_", "as_strided_", "resize_",
        "resize_as_", "set_", "detach_", "requires_grad_", "share_memory_", "rename_", "refine_names_",
    )
)  # fmt: skip


def _note_overlapping_update(saves: StaleSaves, func, args) -> None:
    """An update autograd records of a view two of whose elements are one memory location (an expanded tensor:
    ``x.zero_()``, ``x.fill_(1.5)``, ``x.masked_fill_(m, v)``, the updates eager runs on one) makes eager's
    backward raise when it reaches the update's node (``CopySlices`` copies the gradient into that view):
    noted with the new value of the tensor the view is of."""
    from thunder.tracing.views import is_masked_fill, overlaps_itself

    name = getattr(func, "__name__", "")
    w = args[0] if args else None
    # (x[key] = v: eager's node copies into x[key] alone, which may not overlap itself; but x[mask] = v with one
    # value is eager's x.masked_fill_(mask, v), and x[index_tensors] = v its x.index_put_(index_tensors, v))
    masked_fill = name == "__setitem__" and (is_masked_fill(args) or _integer_tensor_key(args))
    # (x[key] = v into an x[key] that overlaps itself: eager runs it where v is that data, x[0] = x, see self_copies)
    setitem = name == "__setitem__" and not masked_fill
    if type(w) is not TracingTensor or not (masked_fill or setitem or name.endswith("_")):
        return
    if not (masked_fill or setitem) and (name[:1] == "_" or name in _LAYOUT_ONLY):
        return

    m = w._tt_meta
    if setitem and m is not None:
        from thunder.tracing.views import _written_region

        m = _written_region(name, w, args)
    if m is None or not overlaps_itself(m):
        return
    view = w._tt_view
    root = w if view is None else view[0]
    from thunder.tracing.errors import user_frame

    frame = user_frame(4)
    saves.raising.append((root._thunder_proxy, _OVERLAP_ERROR, (frame, frame.f_lineno if frame is not None else None)))


def _integer_tensor_key(args) -> bool:
    key = args[1] if len(args) > 1 else None
    keys = key if isinstance(key, tuple) else (key,)
    return all(isinstance(k, torch.Tensor) and not k.is_floating_point() and k.dtype is not torch.bool for k in keys)


def note_saved(saves: StaleSaves, func, args, kwargs, out, first=None, first_count=None) -> None:
    """Notes the call ``func(*args, **kwargs)`` (which gave ``out``) with the version counts of its tensors, for
    :meth:`StaleSaves.stale` to ask eager which of them it saved if one is updated later. ``first``: the proxy the
    first argument held before the call (an in-place op's target: whether it required grad then decides what eager
    saves)."""
    flat = _flat_tensors(args) + _flat_tensors(kwargs.values())
    if not any(w._thunder_proxy.requires_grad for w in flat):
        return
    _note_overlapping_update(saves, func, args)
    outs = out if type(out) is tuple else (out,)
    # (an in-place op, relu_, is noted too: the result it saves is its updated argument, counted after the update)
    node_out = next((o for o in outs if type(o) is TracingTensor), None)
    if node_out is None:
        return
    from thunder.tracing.errors import user_frame

    frame = user_frame(3)
    where = (frame, frame.f_lineno if frame is not None else None)
    outs = list(outs)
    for w in flat:
        _settle_if_guessed(w)
    counts = [_count(w) for w in flat + outs]
    if first is not None and first_count is not None and any(o is args[0] for o in outs):
        # an in-place op saves its arguments before it updates its target, at their counts then: those sharing the
        # target's counter (x.remainder_(x): eager's backward always raises) were one bump behind
        bumped = _count(args[0]) - first_count
        target = _counter_of(args[0])
        for i, w in enumerate(flat):
            if target is not None and _counter_of(w) is target:
                counts[i] -= bumped
    spec = [_spec(w, first if i == 0 and args and w is args[0] else None) for i, w in enumerate(flat)]
    saves.entries.append((func, args, kwargs, flat, spec, outs, counts, node_out._thunder_proxy, where))
