"""The communication operators that DDP and FSDP put into traces, executed with ``torch.distributed``.

Every collective is issued asynchronously and returns a *pending* value; ``wait`` turns it into
a tensor. In a trace they read as::

    t12 = all_reduce(t11, 'avg', _process_group0, _ddp_state0)
    ...
    t15 = wait(t12)

``all_reduce`` reduces its input in place (the transforms only hand it freshly packed bucket
buffers). ``synchronize`` is DDP's marker in the forward trace: the identity on a bucket of
parameters whose gradient rule all-reduces the bucket's gradients.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from thunder.core.proxies import TensorProxy
from thunder.extend import OperatorExecutor

__all__ = ["dist_ex", "all_reduce", "all_gather", "reduce_scatter", "wait", "synchronize", "Pending"]

#: the executor of the communication operators (thunder.distributed adds it to a jitted module's executors)
dist_ex = OperatorExecutor("torch_distributed", version=torch.__version__)


class Pending:
    """A collective in flight: ``wait`` waits for ``work`` and returns ``tensor`` (divided by ``divisor``)."""

    __slots__ = ("tensor", "work", "divisor")

    def __init__(self, tensor: torch.Tensor, work, divisor: int = 1):
        self.tensor = tensor
        self.work = work
        self.divisor = divisor

    def __repr__(self) -> str:
        return f"Pending({tuple(self.tensor.shape)}, done={self.work is None})"


def _skip(sync_state) -> bool:
    return sync_state is not None and not sync_state.sync_enabled()


# --------------------------------------------------------------------------- all_reduce


def _all_reduce_meta(a: TensorProxy, op: str, group, sync_state=None) -> TensorProxy:
    if op not in ("sum", "avg"):
        raise ValueError(f"all_reduce: op must be 'sum' or 'avg', got {op!r}")
    return TensorProxy(like=a, requires_grad=False)


def _all_reduce_impl(a: torch.Tensor, op: str, group, sync_state=None) -> Pending:
    if _skip(sync_state):  # inside ThunderModule.no_sync(): gradients stay local
        return Pending(a, None)
    world = dist.get_world_size(group)
    work = dist.all_reduce(a, op=dist.ReduceOp.SUM, group=group, async_op=True)
    return Pending(a, work, world if op == "avg" else 1)


all_reduce = dist_ex.register_operator("all_reduce", meta=_all_reduce_meta, fn=_all_reduce_impl)


# --------------------------------------------------------------------------- all_gather


def _all_gather_meta(a: TensorProxy, group, world_size: int) -> TensorProxy:
    return TensorProxy(like=a, shape=(world_size * a.shape[0], *a.shape[1:]), requires_grad=False)


_all_gather_fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _all_gather_impl(a: torch.Tensor, group, world_size: int) -> Pending:
    out = torch.empty((world_size * a.shape[0], *a.shape[1:]), dtype=a.dtype, device=a.device)
    work = _all_gather_fn(out, a.contiguous(), group=group, async_op=True)
    return Pending(out, work)


all_gather = dist_ex.register_operator("all_gather", meta=_all_gather_meta, fn=_all_gather_impl)


# --------------------------------------------------------------------------- reduce_scatter


def _reduce_scatter_meta(a: TensorProxy, op: str, group, world_size: int, sync_state=None, key=None) -> TensorProxy:
    if op not in ("sum", "avg"):
        raise ValueError(f"reduce_scatter: op must be 'sum' or 'avg', got {op!r}")
    if a.shape[0] % world_size:
        raise ValueError(f"reduce_scatter: dim 0 ({a.shape[0]}) is not divisible by the world size {world_size}")
    return TensorProxy(like=a, shape=(a.shape[0] // world_size, *a.shape[1:]), requires_grad=False)


_reduce_scatter_fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _reduce_scatter_impl(a: torch.Tensor, op: str, group, world_size: int, sync_state=None, key=None) -> Pending:
    shape = (a.shape[0] // world_size, *a.shape[1:])
    if sync_state is not None:
        # FSDP under no_sync(): keep the full (unreduced) gradient of bucket ``key``, add it to the next reduction
        unreduced = sync_state.unreduced
        if _skip(sync_state):
            held = unreduced.get(key)
            if held is None:
                unreduced[key] = a.detach().clone()
            else:
                held.add_(a)
            return Pending(torch.zeros(shape, dtype=a.dtype, device=a.device), None)
        held = unreduced.pop(key, None)
        if held is not None:
            a = held.add_(a)
    out = torch.empty(shape, dtype=a.dtype, device=a.device)
    work = _reduce_scatter_fn(out, a.contiguous(), op=dist.ReduceOp.SUM, group=group, async_op=True)
    return Pending(out, work, world_size if op == "avg" else 1)


reduce_scatter = dist_ex.register_operator("reduce_scatter", meta=_reduce_scatter_meta, fn=_reduce_scatter_impl)


# --------------------------------------------------------------------------- wait


def _wait_meta(pending: TensorProxy) -> TensorProxy:
    return TensorProxy(like=pending, requires_grad=False)


def _wait_impl(pending: Pending) -> torch.Tensor:
    if pending.work is not None:
        pending.work.wait()
    t = pending.tensor
    if pending.divisor != 1:
        t.div_(pending.divisor)
    return t


wait = dist_ex.register_operator("wait", meta=_wait_meta, fn=_wait_impl)


# --------------------------------------------------------------------------- synchronize (DDP)


def _synchronize_meta(params: Sequence[TensorProxy], group, sync_state=None) -> tuple[TensorProxy, ...]:
    return tuple(TensorProxy(like=p) for p in params)


def _synchronize_impl(params: Sequence[torch.Tensor], group, sync_state=None) -> tuple[torch.Tensor, ...]:
    return tuple(params)


synchronize = dist_ex.register_operator("synchronize", meta=_synchronize_meta, fn=_synchronize_impl)


def _synchronize_grad(params, group, sync_state=None):
    import thunder.torch as ltorch
    from thunder.core.transforms import get_grad, put_grads

    outs = synchronize(params, group, sync_state)
    grads = [get_grad(o) for o in outs]
    flat = ltorch.cat([ltorch.reshape(g, (-1,)) for g in grads])  # pack the bucket
    reduced = wait(all_reduce(flat, "avg", group, sync_state))
    pieces = ltorch.split(reduced, [g.numel() for g in grads]) if len(grads) > 1 else (reduced,)
    put_grads(params, [ltorch.reshape(piece, tuple(p.shape)) for piece, p in zip(pieces, params)])
    return outs


dist_ex.register_implementation(synchronize, synchronize, grad_transform=_synchronize_grad)
