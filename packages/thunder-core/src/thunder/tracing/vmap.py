"""``torch.vmap`` (``torch.func.vmap``) inside traced code.

PyTorch's vmap wraps its inputs in functorch ``BatchedTensor``s at the dispatcher level, which a
thunder stand-in tensor never reaches. While thunder traces, ``torch.vmap`` is replaced by
:func:`vmap`: when any input is a stand-in it runs the function on :class:`BatchedTracingTensor`s
(the value with the vmapped dimension first, seen by user code with that dimension removed) and
batches each torch call the function makes:

- elementwise operations (arithmetic, comparisons, ``where`` …): one call on the batched values,
  with unbatched operands broadcasting against them;
- indexing of an unbatched tensor by batched index tensors (``mask[b, kv]``, as Hugging Face's
  attention-mask functions do): one advanced-indexing call;
- ``Tensor.new_*`` factories: one call (their result does not depend on the batch);
- ``Tensor.to`` and basic indexing (ints, slices, ``None``, ``...``) of a batched tensor: one call;
- anything else: the call once per batch element, results stacked (always correct, just longer).

Nested vmaps nest levels: a value batched by several levels holds the next level's value.
Outside tracing, or with no stand-in among the inputs, PyTorch's vmap runs unchanged.

The differentiating transforms (``torch.func.grad``, ``vjp``, ``jacrev`` …) are not traced: on
stand-ins they raise an error naming the user's line instead of computing a wrong result.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import optree
import torch

from thunder.tracing.errors import TracingError

__all__ = ["BatchedTracingTensor", "vmap", "patched_vmap", "batched_call", "has_batched", "vmap_active"]

_levels = itertools.count(1)
# how many traced vmaps are running (the tracer looks for batched values only then)
vmap_active = [0]
_ELEMENTWISE_MODULE = "thunder.torch.elementwise"
# in the elementwise module but with dimension-dependent semantics (halving a dim, per-channel weight)
_NOT_POINTWISE = frozenset(("glu", "prelu"))


class BatchedTracingTensor(torch.Tensor):
    """A value inside ``vmap`` at ``level``: ``inner`` holds it with the batch dimension first."""

    @staticmethod
    def __new__(cls, inner: torch.Tensor, level: int):
        t = torch.Tensor._make_wrapper_subclass(
            cls, inner.shape[1:], dtype=inner.dtype, device=inner.device, requires_grad=False
        )
        t._vm_inner = inner
        t._vm_level = level
        return t

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from thunder.tracing.tracer import _current_tracer

        tracer = _current_tracer[-1]
        if tracer is None:
            raise TracingError("a value batched by torch.vmap escaped the traced function")
        return tracer.handle(func, args, kwargs or {})

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise TracingError(f"internal error: {func} reached PyTorch's dispatcher with a vmapped thunder stand-in")

    def __repr__(self, *, tensor_contents=None):
        return f"BatchedTracingTensor(level={self._vm_level}, {self._vm_inner!r})"


def _leaves(x) -> list:
    return optree.tree_leaves(x, none_is_leaf=True, namespace="thunder")


def has_batched(args, kwargs) -> bool:
    """Whether a :class:`BatchedTracingTensor` is among the arguments of a call."""
    return any(isinstance(x, BatchedTracingTensor) for x in _leaves((args, kwargs)))


def _top_level(args, kwargs) -> int | None:
    levels = [x._vm_level for x in _leaves((args, kwargs)) if isinstance(x, BatchedTracingTensor)]
    return max(levels) if levels else None


def _base(x: torch.Tensor) -> torch.Tensor:
    while isinstance(x, BatchedTracingTensor):
        x = x._vm_inner
    return x


def _is_elementwise(func) -> bool:
    from thunder.core.symbol import Symbol
    from thunder.torch.registry import torch_to_thunder

    sym = torch_to_thunder.get(func)
    wrapped = getattr(sym, "__wrapped__", None) if type(sym) is Symbol else None
    return (
        wrapped is not None
        and getattr(wrapped, "__module__", None) == _ELEMENTWISE_MODULE
        and sym.name not in _NOT_POINTWISE
    )


_DIM_OPS = frozenset((torch.unsqueeze, torch.Tensor.unsqueeze, torch.Tensor.expand))


def _is_index(func) -> bool:
    return func is torch.Tensor.__getitem__ or func in (torch.ops.aten.index, torch.ops.aten.index.Tensor)


def batched_call(tracer, func, args: tuple, kwargs: dict):
    """Runs ``func`` on arguments some of which are :class:`BatchedTracingTensor`s."""
    level = _top_level(args, kwargs)
    flat, spec = optree.tree_flatten((args, kwargs), none_is_leaf=True, namespace="thunder")
    batched = [isinstance(x, BatchedTracingTensor) and x._vm_level == level for x in flat]
    n = next(x._vm_inner.shape[0] for x, b in zip(flat, batched) if b)
    name = getattr(func, "__name__", "")

    if name.startswith("new_") and isinstance(args[0], torch.Tensor):
        # a factory method: the result depends on the tensor's dtype and device only
        return tracer.handle(func, (_base(args[0]), *args[1:]), kwargs)

    if _is_elementwise(func):
        ranks = [x.ndim for x in flat if isinstance(x, torch.Tensor)]
        rank = max(ranks)
        inner = []
        for x, b in zip(flat, batched):
            if b:
                v = x._vm_inner
                for _ in range(rank - x.ndim):  # the batch dimension first, then singleton dimensions
                    v = tracer.handle(torch.Tensor.unsqueeze, (v, 1), {})
                inner.append(v)
            else:
                inner.append(x)
        a, k = optree.tree_unflatten(spec, inner)
        out = tracer.handle(func, a, k)
        if isinstance(out, torch.Tensor):
            return BatchedTracingTensor(out, level)

    if func in _DIM_OPS and batched[0] and not any(batched[1:]) and isinstance(args[0], torch.Tensor):
        # a shape operation on the batched tensor only: the same operation behind the batch dimension
        x = args[0]
        if func in (torch.unsqueeze, torch.Tensor.unsqueeze):
            d = args[1] if len(args) > 1 else kwargs["dim"]
            d = d % (x.ndim + 1)
            return BatchedTracingTensor(tracer.handle(func, (x._vm_inner, d + 1), {}), level)
        if func is torch.Tensor.expand and not kwargs:
            sizes = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list, torch.Size)) else args[1:]
            return BatchedTracingTensor(tracer.handle(func, (x._vm_inner, n, *sizes), {}), level)

    if func is torch.Tensor.to and batched[0] and not any(batched[1:]):
        # a cast or move of the batched tensor only: one call on the batched value
        return BatchedTracingTensor(tracer.handle(func, (args[0]._vm_inner, *args[1:]), kwargs), level)

    if func is torch.Tensor.__getitem__ and batched[0] and not any(batched[1:]) and not kwargs:
        key = args[1] if isinstance(args[1], tuple) else (args[1],)
        if all(k is None or k is Ellipsis or isinstance(k, (int, slice)) for k in key):
            # basic indexing of the batched tensor: the same index behind the batch dimension
            out = tracer.handle(func, (args[0]._vm_inner, (slice(None), *key)), {})
            return BatchedTracingTensor(out, level)

    if _is_index(func) and not batched[0]:
        indices = args[1]
        index_list = list(indices) if isinstance(indices, (tuple, list)) else [indices]
        if index_list and all(isinstance(i, torch.Tensor) for i in index_list):
            rank = max(i.ndim for i in index_list)
            aligned = []
            for i in index_list:
                if isinstance(i, BatchedTracingTensor) and i._vm_level == level:
                    v = i._vm_inner
                    for _ in range(rank - i.ndim):
                        v = tracer.handle(torch.Tensor.unsqueeze, (v, 1), {})
                else:
                    v = i
                aligned.append(v)
            # advanced indexing by broadcast index tensors: the batch dimension comes out first
            out = tracer.handle(torch.Tensor.__getitem__, (args[0], tuple(aligned)), {})
            return BatchedTracingTensor(out, level)

    # any other operation: once per batch element, results stacked along the batch dimension
    results = []
    for j in range(n):
        items = [
            tracer.handle(torch.Tensor.__getitem__, (x._vm_inner, j), {}) if b else x for x, b in zip(flat, batched)
        ]
        a, k = optree.tree_unflatten(spec, items)
        results.append(tracer.handle(func, a, k))
    return _stack_results(tracer, results, level, func)


def _stack_results(tracer, results: list, level: int, func):
    first = results[0]
    if isinstance(first, torch.Tensor):
        return BatchedTracingTensor(tracer.handle(torch.stack, (results, 0), {}), level)
    if isinstance(first, (tuple, list)) and all(isinstance(r, type(first)) and len(r) == len(first) for r in results):
        parts = [_stack_results(tracer, [r[i] for r in results], level, func) for i in range(len(first))]
        return type(first)(parts) if type(first) in (tuple, list) else type(first)(*parts)
    if all(r == first for r in results):
        return first
    raise TracingError(f"torch.vmap: {getattr(func, '__name__', func)} returned values that differ per batch element")


# ---------------------------------------------------------------- the vmap replacement


def _move_to_front(tracer, x, dim: int):
    return x if dim == 0 else tracer.handle(torch.movedim, (x, dim, 0), {})


def _batch(tracer, x, dim, level: int):
    if dim is None:
        return x
    if not isinstance(x, torch.Tensor):
        raise TracingError(f"torch.vmap: in_dims gives dimension {dim} for a non-tensor argument")
    return BatchedTracingTensor(_move_to_front(tracer, x, dim % x.ndim), level)


def _unbatch(tracer, x, level: int, n: int, out_dim: int):
    if isinstance(x, BatchedTracingTensor) and x._vm_level == level:
        inner = x._vm_inner
        return inner if out_dim == 0 else tracer.handle(torch.movedim, (inner, 0, out_dim % inner.ndim), {})
    if isinstance(x, torch.Tensor):
        # an output that does not depend on the batch: PyTorch's vmap expands it
        expanded = tracer.handle(
            torch.Tensor.expand, (tracer.handle(torch.Tensor.unsqueeze, (x, 0), {}), n, *x.shape), {}
        )
        return expanded if out_dim == 0 else tracer.handle(torch.movedim, (expanded, 0, out_dim), {})
    return x


def _broadcast_dims(dims, args) -> list:
    if isinstance(dims, (int, type(None))):
        return [optree.tree_map(lambda _: dims, a, none_is_leaf=True, namespace="thunder") for a in args]
    if len(dims) != len(args):
        raise TracingError(f"torch.vmap: in_dims has {len(dims)} entries for {len(args)} arguments")
    return [
        optree.tree_map(lambda _, d=d: d, a, none_is_leaf=True, namespace="thunder")
        if isinstance(d, (int, type(None)))
        else d
        for d, a in zip(dims, args)
    ]


def _traced_vmap_call(func: Callable, in_dims, out_dims, args: tuple, kwargs: dict):
    from thunder.tracing.tracer import _current_tracer

    tracer = _current_tracer[-1]
    level = next(_levels)
    dims = _broadcast_dims(in_dims, args)
    flat_args, spec = optree.tree_flatten(list(args), none_is_leaf=True, namespace="thunder")
    flat_dims = optree.tree_leaves(dims, none_is_leaf=True, namespace="thunder")
    if len(flat_dims) != len(flat_args):
        raise TracingError("torch.vmap: in_dims does not match the structure of the arguments")
    # (a list, not a set: a symbolic size is not hashable; comparing sizes guards their equality)
    sizes = [x.shape[d] for x, d in zip(flat_args, flat_dims) if d is not None and isinstance(x, torch.Tensor)]
    if not sizes or any(s != sizes[0] for s in sizes[1:]):
        raise TracingError(f"torch.vmap: the vmapped dimensions have sizes {sizes}; expected one size")
    n = sizes[0]
    batched = [_batch(tracer, x, d, level) for x, d in zip(flat_args, flat_dims)]
    vmap_active[0] += 1
    try:
        out = func(*optree.tree_unflatten(spec, batched), **kwargs)
    finally:
        vmap_active[0] -= 1
    flat_out, out_spec = optree.tree_flatten(out, none_is_leaf=True, namespace="thunder")
    out_dims_flat = (
        [out_dims] * len(flat_out)
        if isinstance(out_dims, int)
        else optree.tree_leaves(optree.tree_broadcast_prefix(out_dims, out, none_is_leaf=True, namespace="thunder"))
    )
    return optree.tree_unflatten(out_spec, [_unbatch(tracer, x, level, n, d) for x, d in zip(flat_out, out_dims_flat)])


def _has_stand_in(args, kwargs) -> bool:
    from thunder.tracing.tracer import TracingTensor

    return any(isinstance(x, (TracingTensor, BatchedTracingTensor)) for x in _leaves((args, kwargs)))


_original_vmap = torch.vmap


def vmap(
    func: Callable, in_dims: Any = 0, out_dims: Any = 0, randomness: str = "error", *, chunk_size=None
) -> Callable:
    """``torch.vmap`` that also works on thunder's stand-in tensors while tracing."""

    @functools.wraps(func)
    def vmapped(*args, **kwargs):
        if not _has_stand_in(args, kwargs):
            return _original_vmap(func, in_dims, out_dims, randomness, chunk_size=chunk_size)(*args, **kwargs)
        return _traced_vmap_call(func, in_dims, out_dims, args, kwargs)

    return vmapped


# torch.func transforms that differentiate: their functorch wrappers work below __torch_function__,
# so on stand-ins they would compute a wrong result or fail deep inside PyTorch
_UNSUPPORTED_TRANSFORMS = ("grad", "grad_and_value", "vjp", "jvp", "jacrev", "jacfwd", "hessian", "linearize")


def _unsupported_error(name: str) -> TracingError:
    from thunder.tracing.errors import describe_location, user_frame

    frame = user_frame(3)
    where = f" at {describe_location(frame)}" if frame is not None else ""
    return TracingError(
        f"torch.func.{name} inside a function compiled by thunder.jit is not supported{where}: "
        "differentiate outside it (torch.autograd on the jitted function's outputs, or "
        "thunder.core.transforms.grad/vjp)"
    )


# these take the inputs with the function (vjp(f, *primals)); the others return a new function
_APPLIED_DIRECTLY = ("vjp", "jvp", "linearize")


def _unsupported_transform(name: str, original: Callable) -> Callable:
    if name in _APPLIED_DIRECTLY:

        @functools.wraps(original)
        def applied(func, *args, **kwargs):
            if _has_stand_in(args, kwargs):
                raise _unsupported_error(name)
            return original(func, *args, **kwargs)

        return applied

    @functools.wraps(original)
    def transform(func, *t_args, **t_kwargs):
        transformed = original(func, *t_args, **t_kwargs)

        @functools.wraps(func)
        def call(*args, **kwargs):
            if _has_stand_in(args, kwargs):
                raise _unsupported_error(name)
            return transformed(*args, **kwargs)

        return call

    return transform


_originals = {name: getattr(torch.func, name) for name in _UNSUPPORTED_TRANSFORMS if hasattr(torch.func, name)}
_replacements = {name: _unsupported_transform(name, fn) for name, fn in _originals.items()}
_patch_depth = [0]


class patched_vmap:
    """While tracing: ``torch.vmap`` and ``torch.func.vmap`` are :func:`vmap`, and the differentiating
    ``torch.func`` transforms raise a clear error on stand-ins (re-entrant)."""

    def __enter__(self):
        if _patch_depth[0] == 0:
            torch.vmap = vmap
            torch.func.vmap = vmap
            for name, fn in _replacements.items():
                setattr(torch.func, name, fn)
        _patch_depth[0] += 1
        return self

    def __exit__(self, *exc):
        _patch_depth[0] -= 1
        if _patch_depth[0] == 0:
            torch.vmap = _original_vmap
            torch.func.vmap = _original_vmap
            for name, fn in _originals.items():
                setattr(torch.func, name, fn)
        return False
