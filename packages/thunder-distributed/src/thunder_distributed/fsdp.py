"""Fully sharded data parallel (ZeRO-2 and ZeRO-3) as a trace transform.

``fsdp`` replaces every parameter by its local shard (dim 0 split across the ranks, padded when
not divisible), so the optimizer sees only shards. The transform gathers each bucket of shards
with ``all_gather`` right before its first use in the forward trace; the gradient rule of that
gather reduce-scatters (averages) the gradients back into shard gradients. With ZeRO-3 the
forward does not keep the gathered parameters for the backward: the backward gathers them again
right before it needs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch

import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.trace import TraceCtx, from_trace, tracectx
from thunder.core.transforms import get_grad, put_grads
from thunder.extend import claim_bound_symbols, trace_executors
from thunder_distributed._common import (
    TAG,
    DistState,
    attach,
    broadcast_module,
    check_module,
    check_same_device,
    parameter_proxies,
    record,
    resolve_group,
    target_device,
)
from thunder_distributed.hooks import install_buffer_broadcast
from thunder_distributed.mixed_precision import MixedPrecision, install_cast_hooks
from thunder_distributed.ops import _all_gather_fn, _reduce_scatter_fn, all_gather, dist_ex, reduce_scatter, wait

__all__ = ["fsdp", "FSDPType", "FSDPBucketingStrategy", "FSDPTransform", "ShardLayout"]


class FSDPType(Enum):
    """What stays sharded: ZeRO-2 keeps the gathered parameters from forward to backward, ZeRO-3 gathers them again."""

    ZERO2 = "zero2"
    ZERO3 = "zero3"


class FSDPBucketingStrategy(Enum):
    """How parameters are grouped into one ``all_gather``/``reduce_scatter``.

    ``NONE``: one collective per parameter; ``LAYER``: per module owning parameters (a
    ``Linear``'s weight and bias); ``BLOCK``: per element of any ``nn.ModuleList`` (a transformer
    block), per layer elsewhere.
    """

    NONE = "none"
    LAYER = "layer"
    BLOCK = "block"


@dataclass(frozen=True)
class ShardLayout:
    """How a parameter was sharded: its original shape and the dim-0 rows of each rank's shard.

    ``param_dtype``/``reduce_dtype`` (mixed precision, ``None``: the shard's dtype): the dtype the
    shard is cast to before it is gathered (the forward computes with it), and the dtype its
    gradient is reduce-scattered in (then cast back to the shard's dtype).
    """

    shape: tuple[int, ...]
    rows_per_rank: int
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None

    @property
    def rows(self) -> int:
        return self.shape[0] if self.shape else 1


def _enum(what: str, enum_type, value):
    if isinstance(value, enum_type):
        return value
    for member in enum_type:
        if value == member.value or (isinstance(value, str) and value.upper() == member.name):
            return member
    choices = ", ".join(f"{enum_type.__name__}.{m.name}" for m in enum_type)
    raise ValueError(f"thunder.distributed.fsdp: {what}={value!r} is not one of {choices}")


def fsdp(
    model: torch.nn.Module,
    *,
    sharding_strategy: FSDPType | str = FSDPType.ZERO2,
    bucketing_strategy: FSDPBucketingStrategy | str = FSDPBucketingStrategy.NONE,
    broadcast_from: int | None = 0,
    broadcast_buffers: bool = True,
    process_group=None,
    device: torch.device | str | None = None,
    param_init_fn: Callable[[torch.nn.Module], None] | None = None,
    mixed_precision: Any = None,
) -> torch.nn.Module:
    """Fully sharded data parallel: parameters sharded across the group, gathered for use, gradients reduce-scattered.

    Use as ``thunder.jit(thunder.distributed.fsdp(model))`` (or ``fsdp(thunder.jit(model))``). The
    module is moved to this rank's device (``cuda:LOCAL_RANK`` with NCCL, else the CPU), every rank
    starts from ``broadcast_from``'s parameters, and then each parameter is replaced by this rank's
    shard of it (rows ``rank * n : (rank + 1) * n`` of dim 0, zero-padded at the end when dim 0 is
    not divisible by the world size): create the optimizer afterwards. In ``module.state_dict()``
    each sharded parameter is a ``DTensor`` (``Shard(0)`` on a ``DeviceMesh`` over the group), so
    ``torch.distributed.checkpoint`` saves and loads it, at this or another world size;
    :func:`thunder_distributed.get_model_state_dict` gives the full parameters.

    Args:
        model: an ``nn.Module`` or a ``ThunderModule``; it is changed in place and returned.
        sharding_strategy: ``FSDPType.ZERO2`` or ``FSDPType.ZERO3`` (or ``"zero2"``/``"zero3"``).
        bucketing_strategy: ``FSDPBucketingStrategy.NONE``, ``LAYER`` or ``BLOCK``.
        broadcast_from: the rank whose parameters every rank starts from (``None``: leave them).
        broadcast_buffers: buffers are not sharded; as in PyTorch's DDP, each forward with gradients
            enabled starts by copying rank ``broadcast_from``'s (rank 0 if ``None``) to every rank.
        process_group: the group to shard over (default: the world).
        device: where to compute (default: ``cuda:LOCAL_RANK`` with NCCL, else the CPU).
        param_init_fn: for a model built on the ``meta`` device (deferred initialisation): called with
            each submodule once its own parameters and buffers are allocated (uninitialised) on the
            device; default: the submodule's ``reset_parameters()``. Each submodule's parameters are
            sharded right after, so a rank never holds more than one submodule's full parameters.
            Every rank initialises from rank ``broadcast_from``'s random state (sent to the others).
        mixed_precision: a ``torch.distributed.fsdp.MixedPrecisionPolicy``, with FSDP2's meaning: the
            shards keep their dtype (the optimizer's), the forward and backward use ``param_dtype``
            parameters, gradients are reduce-scattered in ``reduce_dtype``; ``cast_forward_inputs``
            and ``output_dtype`` cast the module's floating-point inputs and outputs.

    Raises:
        RuntimeError: no process group is initialised.
        TypeError: ``model`` is not a module, or is already wrapped by PyTorch's DDP/FSDP.
        ValueError: parameters on different devices, an unknown strategy, a module prepared twice.
    """
    from thunder_distributed.deferred_init import has_meta_tensors, materialize_and_shard

    module = check_module("fsdp", model)
    precision = MixedPrecision.from_policy(mixed_precision)
    sharding = _enum("sharding_strategy", FSDPType, sharding_strategy)
    bucketing = _enum("bucketing_strategy", FSDPBucketingStrategy, bucketing_strategy)
    group, rank, world = resolve_group("fsdp", process_group)
    check_same_device("fsdp", module)
    device = target_device(group, device)
    if has_meta_tensors(module):
        sharder = ModuleSharder(module, group, rank, world, precision) if world > 1 or precision else None
        materialize_and_shard(module, device, group, broadcast_from, param_init_fn, sharder)
        layouts = sharder.layouts if sharder is not None else {}
    else:
        if param_init_fn is not None:
            raise ValueError(
                "thunder.distributed.fsdp: param_init_fn is for a model built on the meta device (deferred "
                "initialisation); this model's parameters are already allocated and initialised"
            )
        module.to(device)
        if world > 1 and broadcast_from is not None:
            broadcast_module(module, group, broadcast_from)
        # with mixed precision a world of one still gathers (a no-op) to cast the parameters in the trace
        layouts = _shard_module(module, group, rank, world, precision) if world > 1 or precision else {}
    state = DistState(
        "fsdp",
        module,
        group,
        rank,
        world,
        {"sharding_strategy": sharding, "bucketing_strategy": bucketing, "layouts": layouts},
    )
    if precision is not None:
        state.hook_handles["mixed_precision"] = install_cast_hooks(module, precision)
    if broadcast_buffers:
        install_buffer_broadcast(state, 0 if broadcast_from is None else broadcast_from)
    if layouts:
        from thunder_distributed.checkpoint import install_dtensor_state_dict

        install_dtensor_state_dict(state)  # sharded parameters are DTensors in every state dict
    attach(model, state, FSDPTransform(state))
    return model


@torch.no_grad()
def shard_tensor(t: torch.Tensor, rank: int, world: int) -> tuple[torch.Tensor, ShardLayout]:
    """This rank's shard of ``t`` (dim 0, zero-padded to a multiple of ``world``) and its layout."""
    layout = ShardLayout(tuple(t.shape), math.ceil((t.shape[0] if t.ndim else 1) / world))
    flat = t.reshape(1) if t.ndim == 0 else t
    pad = layout.rows_per_rank * world - layout.rows
    if pad:
        flat = torch.cat([flat, flat.new_zeros((pad, *flat.shape[1:]))])
    return flat[rank * layout.rows_per_rank : (rank + 1) * layout.rows_per_rank].clone(), layout


def _shard_module(
    module: torch.nn.Module, group, rank: int, world: int, precision: MixedPrecision | None = None
) -> dict[str, ShardLayout]:
    """Replaces each parameter by its shard (shared parameters stay shared); returns layouts by name.

    Each module holding shards gets a subclass of its class (same name) whose attribute read of a
    sharded parameter returns ``gather_parameter(shard)``, so the forward sees full parameters.
    """
    sharder = ModuleSharder(module, group, rank, world, precision)
    for m in module.modules():
        sharder.shard_own_parameters(m)
    return sharder.layouts


class ModuleSharder:
    """Shards the parameters of a module tree one submodule at a time (a shared parameter is sharded once)."""

    def __init__(self, root: torch.nn.Module, group, rank: int, world: int, precision: MixedPrecision | None = None):
        self.group, self.rank, self.world = group, rank, world
        self.precision = precision
        self.names = {id(p): n for n, p in root.named_parameters()}
        #: id of an original parameter -> its shard; ids of live originals only (see forget_originals)
        self.replaced: dict[int, tuple[torch.nn.Parameter, ShardLayout]] = {}
        #: id of a shard -> the shard (a module may already hold one: a parameter shared with a module done before)
        self.shards: dict[int, tuple[torch.nn.Parameter, ShardLayout]] = {}
        self.layouts: dict[str, ShardLayout] = {}

    def shard_own_parameters(self, m: torch.nn.Module, name_of: dict[int, str] | None = None) -> None:
        """Replaces ``m``'s own parameters (not its children's) by their shards.

        ``name_of`` names parameters created after this sharder (deferred init allocates them).
        """
        local: dict[str, ShardLayout] = {}
        for key, p in list(m._parameters.items()):
            if p is None or p.numel() == 0:
                continue
            if id(p) in self.shards:
                new, local[key] = self.shards[id(p)]
                continue
            if id(p) not in self.replaced:
                shard, layout = shard_tensor(p.detach(), self.rank, self.world)
                if self.precision is not None and p.is_floating_point():
                    layout = self.precision.applied_to(layout, p.dtype)
                new = torch.nn.Parameter(shard, requires_grad=p.requires_grad)
                self.replaced[id(p)] = self.shards[id(new)] = (new, layout)
                self.layouts[(name_of or {}).get(id(p)) or self.names[id(p)]] = layout
            new, local[key] = self.replaced[id(p)]
            m._parameters[key] = new
        if local:
            m.__class__ = _sharded_class(type(m))
            m.__dict__["_thunder_fsdp"] = (local, self.group, self.world)

    def forget_originals(self) -> None:
        """Drops the ids of originals that may be freed now (their ids could be reused by new tensors)."""
        self.replaced.clear()


# --------------------------------------------------------------------------- reading a sharded parameter


class _GatherParameter(torch.autograd.Function):
    """Eager (outside thunder.jit) gather of a shard; its backward reduce-scatters (averages) the gradient."""

    @staticmethod
    def forward(ctx, shard, layout: ShardLayout, group, world_size: int):
        ctx.layout, ctx.group, ctx.world_size, ctx.dtype = layout, group, world_size, shard.dtype
        if layout.param_dtype is not None:
            shard = shard.to(layout.param_dtype)
        out = torch.empty((world_size * shard.shape[0], *shard.shape[1:]), dtype=shard.dtype, device=shard.device)
        _all_gather_fn(out, shard.contiguous(), group=group)
        return out[: layout.rows].reshape(layout.shape)

    @staticmethod
    def backward(ctx, grad):
        layout, world = ctx.layout, ctx.world_size
        if layout.reduce_dtype is not None:
            grad = grad.to(layout.reduce_dtype)
        g = grad.reshape(layout.rows, *grad.shape[1:] if grad.ndim else ())
        pad = layout.rows_per_rank * world - layout.rows
        if pad:
            g = torch.cat([g, g.new_zeros((pad, *g.shape[1:]))])
        out = torch.empty((layout.rows_per_rank, *g.shape[1:]), dtype=g.dtype, device=g.device)
        _reduce_scatter_fn(out, g.contiguous(), group=ctx.group)
        return out.div_(world).to(ctx.dtype), None, None, None


def gather_parameter(shard: torch.Tensor, layout: ShardLayout, group, world_size: int) -> torch.Tensor:
    """The full parameter from this rank's shard (all ranks must call it). Traced as ``unshard_param``."""
    return _GatherParameter.apply(shard, layout, group, world_size)


def _unshard_param_like(shard, layout, group, world_size: int):
    return _unshard_impl((shard,), (layout,), group, world_size)[0]


#: what tracing records where the model reads a sharded parameter (FSDPTransform buckets them into ``unshard``)
unshard_param = dist_ex.register_operator(
    "unshard_param", like=_unshard_param_like, fn=gather_parameter, replaces=gather_parameter
)


class _ShardedModule:
    """Mixed into the class of each module holding shards: reading a sharded parameter gathers it."""

    def __getattr__(self, name: str):
        info = self.__dict__.get("_thunder_fsdp")
        if info is not None and name in info[0]:
            layouts, group, world_size = info
            return gather_parameter(self._parameters[name], layouts[name], group, world_size)
        return super().__getattr__(name)


_sharded_classes: dict[type, type] = {}


def _sharded_class(cls: type) -> type:
    if issubclass(cls, _ShardedModule):
        return cls
    new = _sharded_classes.get(cls)
    if new is None:
        new = type(
            cls.__name__, (_ShardedModule, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        )
        _sharded_classes[cls] = new
    return new


# --------------------------------------------------------------------------- the gather and its gradient


def _unshard_impl(shards, layouts, group, world_size: int, sync_state=None, key=None):
    """Records the gather of a bucket of shards: ``all_gather``, ``wait``, then the full parameters."""
    shards = tuple(s if lay.param_dtype is None else ltorch.to(s, lay.param_dtype) for s, lay in zip(shards, layouts))
    if len(shards) == 1:
        parts = [wait(all_gather(shards[0], group, world_size))]
    else:
        flat = ltorch.cat([ltorch.reshape(s, (-1,)) for s in shards])
        gathered = wait(all_gather(flat, group, world_size))
        rows = ltorch.reshape(gathered, (world_size, flat.shape[0]))
        parts, offset = [], 0
        for s in shards:
            n = s.numel()
            part = ltorch.getitem(rows, (slice(None), slice(offset, offset + n)))
            parts.append(ltorch.reshape(part, (world_size * s.shape[0], *s.shape[1:])))
            offset += n
    outs = []
    for part, layout in zip(parts, layouts):
        if part.shape[0] != layout.rows:
            part = ltorch.narrow(part, 0, 0, layout.rows)
        if tuple(part.shape) != layout.shape:
            part = ltorch.reshape(part, layout.shape)
        outs.append(part)
    return tuple(outs)


#: FSDP's gather of a bucket of shards into full parameters (a composite of all_gather, wait and reshapes)
unshard = Symbol("unshard", _unshard_impl, id="thunder_distributed.unshard", print_name="unshard")


def _unshard_grad(shards, layouts, group, world_size: int, sync_state=None, key=None):
    outs = _unshard_impl(shards, layouts, group, world_size)
    parts = []
    for o, s, layout in zip(outs, shards, layouts):
        g = get_grad(o)
        if layout.reduce_dtype is not None:
            g = ltorch.to(g, layout.reduce_dtype)
        g = ltorch.reshape(g, (layout.rows, *s.shape[1:]))
        pad = layout.rows_per_rank * world_size - layout.rows
        if pad:
            g = ltorch.pad(g, (0, 0) * (s.ndim - 1) + (0, pad))
        parts.append(g)
    if len(parts) == 1:
        grads = [wait(reduce_scatter(parts[0], "avg", group, world_size, sync_state, key))]
        grads = [g if g.dtype == shards[0].dtype else ltorch.to(g, shards[0].dtype) for g in grads]
    else:
        rows = [ltorch.reshape(p, (world_size, s.numel())) for p, s in zip(parts, shards)]
        flat = ltorch.reshape(ltorch.cat(rows, 1), (-1,))
        reduced = wait(reduce_scatter(flat, "avg", group, world_size, sync_state, key))
        pieces = ltorch.split(reduced, [s.numel() for s in shards])
        grads = [ltorch.reshape(piece, tuple(s.shape)) for piece, s in zip(pieces, shards)]
        grads = [g if g.dtype == s.dtype else ltorch.to(g, s.dtype) for g, s in zip(grads, shards)]
    put_grads(shards, grads)
    return outs


dist_ex.register_implementation(unshard, grad_transform=_unshard_grad)


# --------------------------------------------------------------------------- the transform


def _bucket_key(qual: str, module: torch.nn.Module, strategy: FSDPBucketingStrategy) -> str:
    if strategy is FSDPBucketingStrategy.NONE:
        return qual
    owner = qual.rsplit(".", 1)[0] if "." in qual else ""
    if strategy is FSDPBucketingStrategy.BLOCK:
        m = module
        parts = owner.split(".") if owner else []
        for k, part in enumerate(parts):
            if isinstance(m, torch.nn.ModuleList):
                return ".".join(parts[: k + 1])
            m = getattr(m, part)
    return owner


class FSDPTransform:
    """The trace transform ``fsdp`` registers: one ``unshard`` per bucket, at the bucket's first use.

    Tracing records an ``unshard_param`` wherever the model reads a sharded parameter; this
    transform replaces them by one ``unshard`` (one ``all_gather``) per bucket of parameters.
    """

    def __init__(self, state: DistState):
        self.state = state
        self.__name__ = "fsdp"

    def __call__(self, trace: TraceCtx) -> TraceCtx:
        state = self.state
        reads = [b for b in trace.bound_symbols if b.sym.id == unshard_param.id]
        if not reads:
            return trace
        strategy = state.options["bucketing_strategy"]
        params = parameter_proxies(trace, state.module)
        buckets: dict[tuple, list] = {}  # key -> [(shard, layout)]
        key_of: dict[str, tuple] = {}
        for b in reads:
            shard, layout = b.args[0], b.args[1]
            if shard.name in key_of:
                continue
            qual = params[shard.name][1] if shard.name in params else shard.name
            key = (_bucket_key(qual, state.module, strategy), shard.dtype)
            key_of[shard.name] = key
            buckets.setdefault(key, []).append((shard, layout))

        new = from_trace(trace)
        new.add_constant(state.group, "_process_group")
        new.add_constant(state, "_fsdp_state")
        full_of: dict[str, TensorProxy] = {}  # shard name -> gathered parameter
        mapping: dict[str, TensorProxy] = {}
        info_buckets = []
        with tracectx(new):
            for b in trace.bound_symbols:
                if b.sym.id == unshard_param.id:
                    shard = b.args[0]
                    if shard.name not in full_of:
                        members = buckets[key_of[shard.name]]
                        shards = tuple(s for s, _ in members)
                        layouts = tuple(layout for _, layout in members)
                        key = tuple(params[s.name][1] if s.name in params else s.name for s in shards)
                        outs = unshard(shards, layouts, state.group, state.world_size, state, key)
                        full_of.update((s.name, o) for s, o in zip(shards, outs))
                        info_buckets.append((list(shards), list(outs), layouts))
                    mapping[b.output.name] = full_of[shard.name]
                    continue
                new.bound_symbols.append(b.swap_proxies(mapping))
        new.scopes = [new.bound_symbols]
        info = {"kind": "fsdp", "buckets": info_buckets}
        if state.options["sharding_strategy"] is FSDPType.ZERO3:
            info["rewrite"] = _Zero3Rewrite(state, info_buckets)
        new.tags[TAG] = info
        return new


class _Zero3Rewrite:
    """Forward: save the shards instead of the gathered parameters. Backward: gather them again before use."""

    def __init__(self, state: DistState, buckets):
        self.state = state
        self.buckets = buckets
        self.full = {o.name: i for i, (_, outs, _) in enumerate(buckets) for o in outs}

    def _new_saved(self, saved) -> tuple[tuple, list[int]]:
        kept = [p for p in saved if not (isinstance(p, TensorProxy) and p.name in self.full)]
        needed: list[int] = []
        for p in saved:
            i = self.full.get(getattr(p, "name", None))
            if i is not None and i not in needed:
                needed.append(i)
        have = {p.name for p in kept if isinstance(p, TensorProxy)}
        for i in needed:
            for s in self.buckets[i][0]:
                if s.name not in have:
                    have.add(s.name)
                    kept.append(s)
        return tuple(kept), needed

    def __call__(self, trace: TraceCtx) -> TraceCtx:
        bsyms = list(trace.bound_symbols)
        if trace.fn_name == "augmented_forward_fn":
            ret = bsyms[-1]
            outputs, saved = ret.args[0]
            new_saved, needed = self._new_saved(saved)
            if not needed:
                return trace
            bsyms[-1] = ret.from_bsym(args=((outputs, new_saved),))
        elif trace.fn_name == "backward_fn":
            first = bsyms[0]
            if first.args[0] != "saved_for_backward":
                return trace
            new_saved, needed = self._new_saved(first.output)
            if not needed:
                return trace
            bsyms[0] = first.from_bsym(output=new_saved)
            bsyms = self._regather(trace, bsyms, set(needed))
        else:
            return trace
        new = from_trace(trace)
        new.bound_symbols = bsyms
        new.scopes = [new.bound_symbols]
        return new

    def _regather(self, trace: TraceCtx, bsyms, needed: set[int]):
        state = self.state
        executors = trace_executors(trace) or (dist_ex,)
        out = []
        done: set[int] = set()
        for b in bsyms:
            for a in b.flat_args:
                i = self.full.get(a.name)
                if i is not None and i in needed and i not in done:
                    done.add(i)
                    shards, fulls, layouts = self.buckets[i]
                    result, scope = record(trace, _unshard_impl, tuple(shards), layouts, state.group, state.world_size)
                    mapping = {r.name: f for r, f in zip(result, fulls)}
                    scope = [s.swap_proxies(mapping) for s in scope]
                    out.extend(claim_bound_symbols(scope, executors, trace))
            out.append(b)
        return out
