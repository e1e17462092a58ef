"""A traced program's outputs: collecting what the user's function returns, and writing updates back into object arguments."""

from __future__ import annotations

import torch

from thunder.core import prims, pytree
from thunder.core.aliasing import may_return_alias
from thunder.core.proxies import Proxy
from thunder.core.symbolic import has_symbolic
from thunder.core.trace import get_tracectx
from thunder.tracing.errors import TracingError
from thunder.tracing.inputs import _ObjectArgument
from thunder.tracing.returned_functions import with_returned_closures
from thunder.tracing.tracer import (
    TracingTensor,
    unwrap,
    view_of,
)


def _printable(x) -> bool:
    """Whether the output prints as the trace's return (tuples, lists, str-keyed dicts of tensors and scalars)."""
    t = type(x)
    if isinstance(x, (Proxy, TracingTensor)) or x is None or t in (bool, int, float, str, torch.SymInt, torch.SymFloat):
        return True
    if t is tuple or t is list:
        return all(_printable(y) for y in x)
    if t is dict:
        return all(type(k) is str and _printable(v) for k, v in x.items())
    return False


def _output_leaf(leaf):
    if isinstance(leaf, TracingTensor):
        return leaf._thunder_proxy
    if isinstance(leaf, torch.Tensor):
        raise TracingError(
            "the jitted function returned a tensor created outside of it (a global?); return it separately"
        )
    return leaf


def _copy_outputs_holding_overwritten_inputs(result, tensors) -> None:
    """An output whose value is an input's value before an in-place update (``v.copy_(b); b.add_(1);
    return v``) gets a copy taken before the update is written back into the caller's tensor, or it
    would come back as that very tensor, updated."""
    overwritten = {ti.proxy.name for ti in tensors if ti.wrapper._thunder_proxy is not ti.proxy}
    if not overwritten:
        return
    own = {id(ti.wrapper) for ti in tensors}
    for leaf in pytree.tree_leaves(result):
        if not isinstance(leaf, TracingTensor):
            continue
        view = view_of(leaf)
        root = leaf if view is None else view[0]  # a view re-derives from its root
        if id(root) not in own and root._tt_value.name in overwritten:
            note_copy(root)
            root._tt_value = prims.clone.record(get_tracectx(), (root._tt_value,), {})
            root._tt_version += 1


def note_copy(w: TracingTensor) -> None:
    """Remembers ``w``'s value before an output step replaces it with a copy: the views the user's code made of
    ``w`` stay views of that value in the program, and with symbolic sizes their layout over ``w`` is read from
    it when the program runs (``PostCall._plan_internal_view``)."""
    if w._tt_uncopied is None:
        w._tt_uncopied = w._tt_value


def copy_fresh_outputs_run_as_views(result, tensors) -> None:
    """An output eager computes as a tensor of its own, which the program would give back as a view or an alias,
    gets a copy: eager's has no ``_base``, and an in-place update of it after the call works with grad.

    The forms: an op that gave an input's value back (``torch.logsumexp(x, -1)`` of a 0-d ``x``: eager's result
    is a new tensor); a tensor updated in place through a view of it (``y = x * 2; y.view(-1)[0] = 3; return
    y``), whose new value the program makes again from the updated view with a shape op; and a shape op of an
    input updated in place (``x.fill_(1); return x.reshape(-1)`` of an expanded ``x``: eager's reshape copies,
    the program reshapes the new value, a tensor of its own); an op that gave back the value of a tensor the
    program computes, returned beside it (``v1 = torch.cumsum(v0, 0)`` of a 0-d ``v0``)."""
    inputs = None
    holders: dict[str, int] = {}  # value name -> the output holding it
    for leaf in pytree.tree_leaves(result):
        if type(leaf) is not TracingTensor or leaf._tt_view is not None or leaf._tt_pending is not None:
            continue
        if inputs is None:
            inputs = {id(ti.wrapper) for ti in tensors}
            # the new value of each input updated in place, and the inputs' values as called
            updated = {ti.wrapper._thunder_proxy.name for ti in tensors if ti.wrapper._tt_version}
            given = updated | {ti.proxy.name for ti in tensors}
            # and the copies the program reads of inputs sharing a storage with others (contiguous, where the caller's
            # tensor may not be: a reshape of the copy is a view where eager's reshape copies)
            updated |= _copies_of(given)
        if id(leaf) in inputs:
            continue
        value = leaf._tt_value
        other = holders.setdefault(value.name, id(leaf)) != id(leaf)
        # (a shape op of an input as called runs on the caller's tensor, copying where eager's does)
        if other or value.name in given or _reshapes(value, None if leaf._tt_version else updated):
            note_copy(leaf)
            leaf._tt_value = prims.clone.record(get_tracectx(), (value,), {})
            leaf._tt_version += 1


def rederive_symbolic_views(result, tensors) -> None:
    """An output that is a view of a tensor the program computes, updated in place through that view
    (``v = y[1:]; v.clamp_(0, 1); return v``), holds the update's result, a tensor of its own; with symbolic sizes
    the step after the call reads the view's layout from the program's output when it runs (the tensor's sizes or
    the view's are symbolic), so the output is made again as that view of the tensor's new value."""
    inputs = None
    for leaf in pytree.tree_leaves(result):
        if type(leaf) is not TracingTensor or leaf._tt_view is None or leaf._tt_view[1] is None:
            continue
        root = leaf._tt_view[0]
        value = leaf._thunder_proxy
        # (a view of static sizes of a tensor of symbolic ones, ``y[:3]``, is laid over that tensor when it runs too)
        if root._tt_view is not None or not (has_symbolic(value.shape) or has_symbolic(root._thunder_proxy.shape)):
            continue
        if inputs is None:
            inputs = {id(ti.wrapper) for ti in tensors}
        if id(root) in inputs or _made_from(value, root._thunder_proxy):
            continue
        leaf._tt_seen = -1  # (re-derived from the root's value on its next read)


def _made_from(value, base) -> bool:
    """Whether the symbol that computed ``value`` read ``base`` first (a view op of it)."""
    for b in reversed(get_tracectx().bound_symbols):
        if any(o is value for o in b.flat_outs):
            args = b.flat_args
            return bool(args) and args[0] is base
    return False


def _copies_of(names: set[str]) -> set[str]:
    """The names of the values the trace made so far as clones of the values named ``names``."""
    return {
        b.output.name
        for b in get_tracectx().bound_symbols
        if b.sym.name == "clone"
        and b.args
        and getattr(b.args[0], "name", None) in names
        and isinstance(b.output, Proxy)
    }


def _reshapes(value, of: set[str] | None) -> bool:
    """Whether the symbol that computed ``value`` may return a view of its argument (a reshape, a transpose), of one
    of the values named ``of`` (None: of any)."""
    for b in reversed(get_tracectx().bound_symbols):
        if any(o is value for o in b.flat_outs):
            if not may_return_alias(b.sym):
                return False
            return of is None or any(getattr(a, "name", None) in of for a in b.flat_args)
    return False


def _plan_object_updates(objects: list[_ObjectArgument], extra_outputs: list) -> list[_ObjectArgument]:
    """For each object argument the traced code changed, where each value of its new state comes from."""
    changed = []
    for obj in objects:
        pytree.discover_nodes(obj.copy)
        post_leaves, post_spec = pytree.tree_flatten(obj.copy)
        pre_index = {id(w): i for i, w in enumerate(obj.wrapped_leaves) if isinstance(w, TracingTensor)}
        same = post_spec == obj.spec and all(a is b for a, b in zip(post_leaves, obj.wrapped_leaves))
        if same:
            continue
        sources = []
        for leaf in post_leaves:
            if isinstance(leaf, TracingTensor) and id(leaf) in pre_index:
                sources.append(("pre", pre_index[id(leaf)]))  # in-place updates reach the caller's tensor
            elif isinstance(leaf, TracingTensor):
                sources.append(("out", len(extra_outputs)))
                extra_outputs.append(leaf._thunder_proxy)
            elif isinstance(leaf, torch.Tensor):
                raise TracingError(
                    f"the traced code stored a tensor created outside of it into the argument {obj.expr}; "
                    "thunder cannot keep such a tensor between calls"
                )
            else:
                sources.append(("const", leaf))
        obj.post_spec, obj.sources = post_spec, sources
        changed.append(obj)
    return changed


def _assign_into(dst, src) -> None:
    """Makes the caller's object ``dst`` hold ``src``'s state, updating nested objects and lists in place."""
    if isinstance(dst, list):
        for i, v in enumerate(src):
            if i < len(dst) and _same_object_kind(dst[i], v):
                _assign_into(dst[i], v)
            elif i < len(dst):
                dst[i] = v
            else:
                dst.append(v)
        del dst[len(src) :]
        return
    if type(dst) is dict:
        for k in list(dst):
            if k not in src:
                del dst[k]
        for k, v in src.items():
            if k in dst and _same_object_kind(dst[k], v):
                _assign_into(dst[k], v)
            else:
                dst[k] = v
        return
    d = dst.__dict__
    for k in list(d):
        if k not in src.__dict__:
            del d[k]
    for k, v in src.__dict__.items():
        old = d.get(k, None)
        if old is not None and _same_object_kind(old, v):
            _assign_into(old, v)
        else:
            d[k] = v


def _same_object_kind(a, b) -> bool:
    t = type(a)
    if t is not type(b):
        return False
    return t is list or t is dict or (pytree.is_registered(t) and not isinstance(a, dict) and hasattr(a, "__dict__"))


def _make_finish(out_spec, out_leaves: list, positions: list[int], n_out: int, objects: list, index: dict):
    """The function the prologue calls on the computation's result with the caller's object arguments:
    writes the objects' new state into them, and rebuilds the output (returning the caller's own object
    where the traced code returned an argument object)."""

    def finish(values, *current_objects):
        values = tuple(values)
        user_values, extra = values[:n_out], values[n_out:]
        for obj, current in zip(objects, current_objects):
            if obj.post_spec is None:  # returned, not changed
                continue
            if type(current) is dict and list(current) != obj.keys:  # same keys (checked), another order
                pre = pytree.tree_leaves({k: current[k] for k in obj.keys})
            else:
                pre = pytree.tree_leaves(current)
            leaves = [
                pre[where] if kind == "pre" else extra[where] if kind == "out" else where for kind, where in obj.sources
            ]
            _assign_into(current, pytree.tree_unflatten(obj.post_spec, leaves))
        leaves = list(out_leaves)
        for i, v in zip(positions, user_values):
            leaves[i] = v
        for i, leaf in enumerate(out_leaves):
            k = index.get(id(leaf))
            if k is not None:
                leaves[i] = current_objects[k]
        return pytree.tree_unflatten(out_spec, leaves)

    return finish


def _collect_output(result, objects: list[_ObjectArgument]):
    """``(the trace's return value, finish, prologue expressions finish takes)``; ``finish`` is None when the
    output prints as the trace's return and no object argument changed."""
    extra: list = []
    updates = _plan_object_updates(objects, extra)
    copies = {id(o.copy) for o in objects}
    result = with_returned_closures(
        result, lambda x: isinstance(x, TracingTensor), lambda x: id(x) in copies or isinstance(x, torch.Tensor)
    )
    needed = updates + [o for o in objects if o not in updates and _contains(result, o.copy)]
    if _printable(result) and not needed:
        return unwrap(result), None, []
    index = {id(o.copy): k for k, o in enumerate(needed)}
    pytree.discover_nodes(result)
    leaves, spec = pytree.tree_flatten(result, is_leaf=lambda x: id(x) in copies)
    out_leaves = [leaf if id(leaf) in copies else _output_leaf(leaf) for leaf in leaves]
    # (a size computed from symbolic sizes is an output of the computation, like a tensor)
    positions = [
        i
        for i, leaf in enumerate(out_leaves)
        if isinstance(leaf, Proxy) or type(leaf) in (torch.SymInt, torch.SymFloat)
    ]
    proxies = [out_leaves[i] for i in positions]
    finish = _make_finish(spec, out_leaves, positions, len(proxies), needed, index)
    return tuple(proxies) + tuple(extra), finish, [o.expr for o in needed]


def _contains(tree, obj, depth: int = 0) -> bool:
    if tree is obj:
        return True
    if depth > 6:
        return False
    if isinstance(tree, (tuple, list)):
        return any(_contains(y, obj, depth + 1) for y in tree)
    if isinstance(tree, dict):
        return any(_contains(y, obj, depth + 1) for y in tree.values())
    d = getattr(tree, "__dict__", None)
    if type(d) is dict and pytree.is_registered(type(tree)):
        return any(_contains(y, obj, depth + 1) for y in d.values())
    return False
