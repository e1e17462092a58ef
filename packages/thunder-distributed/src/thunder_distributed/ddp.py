"""Distributed data parallel as a trace transform: bucketed gradient all-reduces in the backward trace."""

from __future__ import annotations

import torch

import thunder
from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx
from thunder_distributed._common import (
    TAG,
    DistState,
    attach,
    broadcast_module,
    check_module,
    check_same_device,
    insert_before_first_use,
    parameter_proxies,
    resolve_group,
    target_device,
)
from thunder_distributed.hooks import install_buffer_broadcast, install_grad_hooks
from thunder_distributed.ops import synchronize

__all__ = ["ddp", "DDPTransform"]


def ddp(
    model: torch.nn.Module,
    *,
    bucket_size_in_mb: float = 25.0,
    broadcast_from: int | None = 0,
    broadcast_buffers: bool = True,
    process_group=None,
    device: torch.device | str | None = None,
) -> torch.nn.Module:
    """Distributed data parallel: gradients are averaged across the process group in the backward.

    Use as ``thunder.jit(thunder.distributed.ddp(model))`` (or ``ddp(thunder.jit(model))``). The
    module is moved to this rank's device (``cuda:LOCAL_RANK`` with NCCL, else the CPU) and, unless
    ``broadcast_from`` is ``None``, every rank starts from that rank's parameters and buffers.

    The transform puts a ``synchronize`` call on each bucket of parameters before its first use in
    the forward trace; its gradient rule packs the bucket's gradients, ``all_reduce``\\ s them (an
    average) and unpacks them, so in the backward trace each bucket's all-reduce is issued as soon as
    its gradients exist, and the ``wait``\\ s come at the end. Inside ``ThunderModule.no_sync()`` the
    all-reduces are skipped (gradients accumulate locally) and the accumulated gradients are
    all-reduced when the context manager exits.

    Used without ``thunder.jit`` (eager, ``torch.compile(model)``, ThunderFX), each parameter's
    gradient is averaged by a hook once the backward has accumulated it, and the module gets a
    ``no_sync()`` context manager with PyTorch DDP's meaning. With ``broadcast_buffers`` (as in
    PyTorch's DDP) every forward with gradients enabled starts by copying the buffers (BatchNorm
    running statistics...) of rank ``broadcast_from`` (rank 0 if that is ``None``) to every rank.

    Args:
        model: an ``nn.Module`` or a ``ThunderModule``; it is changed in place and returned.
        bucket_size_in_mb: parameters (in order of first use) are packed into buckets of about this
            size; ``0`` gives one bucket per parameter.
        broadcast_from: the rank whose parameters every rank starts from (``None``: leave them).
        broadcast_buffers: keep the buffers equal across ranks by broadcasting them before each forward.
        process_group: the group to average over (default: the world).
        device: where to compute (default: ``cuda:LOCAL_RANK`` with NCCL, else the CPU).

    Raises:
        RuntimeError: no process group is initialised.
        TypeError: ``model`` is not a module, or is already wrapped by PyTorch's DDP/FSDP.
        ValueError: parameters on different devices, or a module prepared twice.
    """
    module = check_module("ddp", model)
    if bucket_size_in_mb < 0:
        raise ValueError(f"thunder.distributed.ddp: bucket_size_in_mb must be >= 0, got {bucket_size_in_mb}")
    group, rank, world = resolve_group("ddp", process_group)
    check_same_device("ddp", module)
    module.to(target_device(group, device))
    state = DistState("ddp", module, group, rank, world, {"bucket_size_in_mb": bucket_size_in_mb})
    if world > 1 and broadcast_from is not None:
        broadcast_module(module, group, broadcast_from)
    if not isinstance(model, thunder.ThunderModule):
        install_grad_hooks(state)  # used without thunder.jit (eager, torch.compile, ThunderFX)
    if broadcast_buffers:
        install_buffer_broadcast(state, 0 if broadcast_from is None else broadcast_from)
    attach(model, state, DDPTransform(state))
    return model


def _nbytes(p: TensorProxy) -> int:
    return p.numel() * dtypes.to_torch_dtype(p.dtype).itemsize


class DDPTransform:
    """The trace transform ``ddp`` registers: a ``synchronize`` per bucket of parameters."""

    def __init__(self, state: DistState):
        self.state = state
        self.__name__ = "ddp"

    def buckets(self, trace: TraceCtx) -> list[list[TensorProxy]]:
        params = parameter_proxies(trace, self.state.module)
        order: list[TensorProxy] = []
        seen: set[str] = set()
        for b in trace.bound_symbols:
            for a in b.flat_args:
                if a.name in params and a.name not in seen:
                    seen.add(a.name)
                    order.append(a)
        limit = self.state.options["bucket_size_in_mb"] * 1024 * 1024
        buckets: list[list[TensorProxy]] = []
        size = 0
        for p in order:
            fits = buckets and buckets[-1][0].dtype == p.dtype and size + _nbytes(p) <= limit
            if fits:
                buckets[-1].append(p)
                size += _nbytes(p)
            else:
                buckets.append([p])
                size = _nbytes(p)
        return buckets

    def __call__(self, trace: TraceCtx) -> TraceCtx:
        state = self.state
        if state.world_size == 1:
            return trace  # nothing to communicate
        buckets = self.buckets(trace)
        if not buckets:
            return trace

        def emit(i, bucket):
            return synchronize(tuple(bucket), state.group, state)

        new, _ = insert_before_first_use(trace, buckets, emit, {"_process_group": state.group, "_ddp_state": state})
        new.tags[TAG] = {"kind": "ddp", "buckets": [[p.name for p in b] for b in buckets]}
        return new
