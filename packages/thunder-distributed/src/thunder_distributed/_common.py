"""What DDP and FSDP share: checks, device placement, hooking into ``thunder.jit`` and the trace passes.

A transform is attached to a module in one of two ways:

- ``ddp(thunder.jit(model))``: the ThunderModule's compile data gets the transform, the
  communication executor and the pass executor right away;
- ``thunder.jit(ddp(model))``: ``ddp`` stores a set-up callable in ``model._thunder_jit_setup``,
  which ``thunder.jit`` calls with the new ThunderModule (the one hook thunder-core offers for this).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, from_trace, tracectx
from thunder.extend import FusionExecutor
from thunder_distributed.hooks import move_buffer_broadcast, remove_grad_hooks
from thunder_distributed.ops import all_reduce, dist_ex, reduce_scatter, wait

__all__ = ["DistState", "TAG"]

#: trace tag holding what the transform inserted (copied into the forward and backward traces)
TAG = "thunder_distributed"


# --------------------------------------------------------------------------- checks and placement


def resolve_group(what: str, process_group) -> tuple[Any, int, int]:
    """The process group (default: the world), this process's rank in it and its size."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            f"thunder.distributed.{what}: torch.distributed has no process group; call "
            "torch.distributed.init_process_group(...) first (torchrun sets up the environment it needs)"
        )
    group = process_group if process_group is not None else dist.group.WORLD
    return group, dist.get_rank(group), dist.get_world_size(group)


def check_module(what: str, model) -> torch.nn.Module:
    """The module to prepare (a ThunderModule's inner module), or a clear error."""
    import thunder

    module = model._model if isinstance(model, thunder.ThunderModule) else model
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"thunder.distributed.{what} expects a torch.nn.Module, got {type(model).__name__}")
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        wrappers = (*wrappers, FullyShardedDataParallel)
    except ImportError:  # pragma: no cover - builds without FSDP
        pass
    if isinstance(module, wrappers):
        raise TypeError(
            f"thunder.distributed.{what}: the module is already wrapped in {type(module).__name__}; "
            "pass the plain module (thunder does the data parallelism itself)"
        )
    existing = getattr(module, "_thunder_distributed", None)
    if existing is not None:
        raise ValueError(
            f"thunder.distributed.{what}: this module was already prepared with thunder.distributed.{existing.kind}"
        )
    return module


def check_same_device(what: str, module: torch.nn.Module) -> torch.device | None:
    first = None
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        if first is None:
            first = (name, t.device)
        elif t.device != first[1]:
            raise ValueError(
                f"thunder.distributed.{what}: all parameters and buffers must be on one device, but {first[0]!r} is "
                f"on {first[1]} and {name!r} is on {t.device}"
            )
    return None if first is None else first[1]


def target_device(group, device) -> torch.device:
    """Where this rank computes: ``device`` if given, ``cuda:LOCAL_RANK`` with NCCL, else the CPU."""
    if device is not None:
        return torch.device(device)
    if dist.get_backend(group) == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("the process group uses NCCL but CUDA is not available")
        local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank() % torch.cuda.device_count()))
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


@torch.no_grad()
def broadcast_module(module: torch.nn.Module, group, src_rank: int) -> None:
    """Makes every rank start from ``src_rank``'s parameters and buffers."""
    src = dist.get_global_rank(group, src_rank) if group is not dist.group.WORLD else src_rank
    seen = set()
    for t in [*module.parameters(), *module.buffers()]:
        if id(t) in seen:
            continue
        seen.add(id(t))
        dist.broadcast(t.data, src, group=group)


def sanitize(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def unique_named_parameters(module: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    return list(module.named_parameters())  # shared parameters once, under their first name


def parameter_proxies(trace: TraceCtx, module: torch.nn.Module) -> dict[str, tuple[TensorProxy, str]]:
    """``{proxy name: (proxy, parameter name)}`` for the module parameters the trace takes as inputs."""
    by_name = {p.name: p for p in trace.args if isinstance(p, TensorProxy)}
    out = {}
    for qual, param in unique_named_parameters(module):
        proxy = by_name.get("t_" + sanitize(qual))
        if proxy is None or not param.requires_grad:
            continue
        if tuple(proxy.shape) != tuple(param.shape):
            raise RuntimeError(
                f"thunder.distributed: trace input {proxy.name} does not look like parameter {qual!r} "
                f"(shape {tuple(proxy.shape)} vs {tuple(param.shape)})"
            )
        out[proxy.name] = (proxy, qual)
    return out


# --------------------------------------------------------------------------- state and attachment


class DistState:
    """What ``ddp``/``fsdp`` set up for one module; stored as ``module._thunder_distributed``.

    Traces hold it as a constant (the collectives read and record in it), so it has ``__slots__``:
    thunder's pytrees treat an object with a ``__dict__`` (or a dataclass) as a container and would
    rebuild a copy of it wherever a trace is transformed.
    """

    __slots__ = (
        "kind",
        "module",
        "group",
        "rank",
        "world_size",
        "options",
        "thunder_module",
        "hook_handles",
        "buffer_hook",
        "eager_no_sync",
        "unreduced",
    )

    def __init__(self, kind: str, module: torch.nn.Module, group, rank: int, world_size: int, options: dict):
        self.kind = kind  # "ddp" or "fsdp"
        self.module = module
        self.group = group
        self.rank = rank
        self.world_size = world_size
        self.options = options
        self.thunder_module: Any = None
        #: hooks installed on the module or its parameters (see hooks.py), by purpose
        self.hook_handles: dict[str, list] = {}
        #: the forward hooks keeping buffers in sync (moved to the ThunderModule when jitted)
        self.buffer_hook: Any = None
        #: inside the plain module's ``no_sync()`` (DDP used without thunder.jit)
        self.eager_no_sync = False
        #: FSDP inside ``no_sync()``: each bucket's full gradients, summed, waiting for the next reduce-scatter
        self.unreduced: dict[tuple, torch.Tensor] = {}

    def sync_enabled(self) -> bool:
        """False inside ``ThunderModule.no_sync()`` (read by ``all_reduce`` when the backward runs)."""
        tm = self.thunder_module
        return tm is None or not tm._no_sync

    def __repr__(self) -> str:
        return f"<thunder.distributed.{self.kind} rank {self.rank} of {self.world_size}>"


def attach(model, state: DistState, transform: Callable[[TraceCtx], TraceCtx]) -> None:
    """Applies ``transform`` when ``model`` (or the ThunderModule it becomes) is compiled."""
    import thunder

    def setup(tm) -> None:
        cd = thunder.compile_data(tm)
        if transform not in cd.transforms:
            cd.transforms.append(transform)
        executors = [ex for ex in cd.executors if ex is not dist_ex and ex is not pass_ex]
        cd.executors = (dist_ex, *executors, pass_ex)
        cd.cache.clear()  # entries compiled before the transform are stale
        state.thunder_module = tm
        remove_grad_hooks(state)  # the trace all-reduces now
        move_buffer_broadcast(state, tm)
        if state.kind == "ddp":
            tm.no_sync = _ddp_no_sync(tm, state)

    state.module._thunder_distributed = state
    if isinstance(model, thunder.ThunderModule):
        setup(model)
    else:
        hooks = list(getattr(model, "_thunder_jit_setup", ()))
        hooks.append(setup)
        model._thunder_jit_setup = hooks


def _ddp_no_sync(tm, state: DistState):
    """``ThunderModule.no_sync`` for DDP: no gradient all-reduce inside; the accumulated gradients are synced on exit."""

    @contextmanager
    def no_sync():
        """Context manager to disable gradient synchronization (DDP); gradients are all-reduced on exit."""
        previous = tm._no_sync
        tm._no_sync = True
        try:
            yield
        finally:
            tm._no_sync = previous
            if not previous:
                all_reduce_grads(state)

    return no_sync


@torch.no_grad()
def all_reduce_grads(state: DistState) -> None:
    """Averages the parameters' ``.grad`` across the group (what ``no_sync`` does on exit)."""
    if state.world_size == 1:
        return
    grads = [p.grad for p in state.module.parameters() if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=state.group)
    flat.div_(state.world_size)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


# --------------------------------------------------------------------------- trace helpers


def insert_before_first_use(
    trace: TraceCtx,
    buckets: list[list[TensorProxy]],
    emit: Callable[[int, list[TensorProxy]], list[TensorProxy]],
    constants: dict[str, Any],
) -> tuple[TraceCtx, list[list[TensorProxy]]]:
    """A copy of ``trace`` where ``emit(i, bucket)`` records bucket ``i``'s operation right before the
    first use of any of its proxies, and later uses read the proxies ``emit`` returned instead."""
    new = from_trace(trace)
    for prefix, value in constants.items():
        new.add_constant(value, prefix)
    bucket_of = {p.name: i for i, b in enumerate(buckets) for p in b}
    outputs: list[list[TensorProxy] | None] = [None] * len(buckets)
    mapping: dict[str, TensorProxy] = {}
    with tracectx(new):
        for bsym in trace.bound_symbols:
            for a in bsym.flat_args:
                i = bucket_of.get(a.name)
                if i is not None and outputs[i] is None:
                    outs = list(emit(i, buckets[i]))
                    outputs[i] = outs
                    for p, o in zip(buckets[i], outs):
                        mapping[p.name] = o
            new.bound_symbols.append(bsym.swap_proxies(mapping))
    new.scopes = [new.bound_symbols]
    return new, [o or [] for o in outputs]


def _consumers_of_waits(bsyms: list[BoundSymbol]) -> set[int]:
    """Indices of the ``wait`` calls on gradient reductions and of everything computed from their results."""
    reductions: set[str] = set()
    deferred_names: set[str] = set()
    deferred: set[int] = set()
    for i, b in enumerate(bsyms):
        if b.sym is all_reduce or b.sym is reduce_scatter:
            reductions.update(o.name for o in b.flat_outs)
        if (b.sym is wait and b.flat_args and b.flat_args[0].name in reductions) or any(
            a.name in deferred_names for a in b.flat_args
        ):
            deferred.add(i)
            deferred_names.update(o.name for o in b.flat_outs)
    return deferred


def sink_waits(trace: TraceCtx) -> TraceCtx:
    """Moves each ``wait`` (and what uses its result) to just before the return, so communication
    overlaps with the computation that follows it."""
    bsyms = list(trace.bound_symbols)
    if not bsyms or bsyms[-1].sym.name != "python_return":
        return trace
    body, ret = bsyms[:-1], bsyms[-1]
    deferred = _consumers_of_waits(body)
    if not deferred:
        return trace
    new = from_trace(trace)
    new.bound_symbols = [b for i, b in enumerate(body) if i not in deferred]
    new.bound_symbols += [b for i, b in enumerate(body) if i in deferred]
    new.bound_symbols.append(ret)
    new.scopes = [new.bound_symbols]
    return new


class DistributedPassExecutor(FusionExecutor):
    """Claims nothing; its pass reorders communication in the traces ``ddp``/``fsdp`` transformed.

    In backward traces it sinks ``wait`` calls (the all-reduces / reduce-scatters are issued as soon
    as their bucket's gradients exist; the waits happen at the end). For ZeRO-3 it also makes the
    backward gather the parameters again instead of keeping the forward's gathered parameters.
    """

    region_name = "distributed"

    def can_fuse(self, bsym) -> bool:
        return False

    def fusion_pass(self, trace: TraceCtx) -> TraceCtx:
        info = trace.tags.get(TAG)
        if info is None:
            return trace
        rewrite = info.get("rewrite")
        if rewrite is not None:
            trace = rewrite(trace)
        if trace.fn_name == "backward_fn":
            trace = sink_waits(trace)
        return trace


#: the pass executor thunder.distributed appends to a jitted module's executors
pass_ex = DistributedPassExecutor("torch_distributed_passes")


def record(trace: TraceCtx, fn: Callable, *args, **kwargs) -> tuple[Any, list[BoundSymbol]]:
    """Runs ``fn`` (calling symbols) in ``trace``, returning its result and the bound symbols it recorded."""
    scope: list[BoundSymbol] = []
    with tracectx(trace):
        trace.scopes.append(scope)
        try:
            result = fn(*args, **kwargs)
        finally:
            trace.scopes.pop()
    return result, scope


def is_symbol(bsym: BoundSymbol, sym: Symbol) -> bool:
    return bsym.sym is sym or bsym.sym.id == sym.id
