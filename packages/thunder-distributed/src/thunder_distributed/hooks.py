"""Synchronisation that runs as PyTorch hooks rather than inside a trace.

- DDP's gradient averaging when the module runs *without* ``thunder.jit`` (eager,
  ``torch.compile``, ThunderFX): a post-accumulate-grad hook on each parameter all-reduces its
  ``.grad`` (the accumulated one, so gradient accumulation under ``no_sync`` averages the sum, as
  PyTorch's DDP does). ``thunder.jit`` removes these hooks: its traces carry the all-reduces.
- Buffer broadcasting (PyTorch DDP's ``broadcast_buffers``): before each forward with gradients
  enabled, every rank takes the buffers (BatchNorm running statistics...) of the source rank.
  The hook sits on the module and moves to the ``ThunderModule`` when the module is jitted
  (a hook on the inner module would be traced, not run).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

if TYPE_CHECKING:  # pragma: no cover
    from thunder_distributed._common import DistState

__all__ = ["install_grad_hooks", "remove_grad_hooks", "install_buffer_broadcast", "move_buffer_broadcast"]


def install_grad_hooks(state: DistState) -> None:
    """Averages each parameter's ``.grad`` across the group after the backward accumulated it.

    Also gives the plain module a ``no_sync()`` context manager (as PyTorch's DDP has): inside it
    the gradients stay local; the next backward outside it averages the accumulated sum.
    """
    if state.world_size == 1:
        return
    seen: set[int] = set()
    handles = []
    for p in state.module.parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        handles.append(p.register_post_accumulate_grad_hook(_grad_averager(state)))
    state.hook_handles["grad"] = handles

    @contextmanager
    def no_sync():
        """Context manager: no gradient all-reduce inside; the next synced backward averages the accumulated sum."""
        previous = state.eager_no_sync
        state.eager_no_sync = True
        try:
            yield
        finally:
            state.eager_no_sync = previous

    state.module.no_sync = no_sync


def _grad_averager(state: DistState):
    @torch.no_grad()
    def average_grad(p: torch.Tensor) -> None:
        if state.eager_no_sync or p.grad is None:
            return
        dist.all_reduce(p.grad, group=state.group)
        p.grad.div_(state.world_size)

    return average_grad


def remove_grad_hooks(state: DistState) -> None:
    """Called when the module is jitted: the trace all-reduces, the hooks must not do it again."""
    for h in state.hook_handles.pop("grad", ()):
        h.remove()
    if "no_sync" in state.module.__dict__:
        del state.module.no_sync


def install_buffer_broadcast(state: DistState, src_rank: int | None) -> None:
    """Every rank copies ``src_rank``'s buffers before a forward, when PyTorch's DDP would.

    That is (as ``DistributedDataParallel(broadcast_buffers=True)`` does) before the first forward
    and before every forward that follows one run with gradients enabled outside ``no_sync()``.
    """
    buffers = _unique_buffers(state.module)
    if state.world_size == 1 or src_rank is None or not buffers:
        return
    src = dist.get_global_rank(state.group, src_rank) if state.group is not dist.group.WORLD else src_rank
    pending = [True]

    def pre_forward(module, args) -> None:
        if pending[0]:
            _broadcast(buffers, src, state.group)

    def post_forward(module, args, output) -> None:
        pending[0] = torch.is_grad_enabled() and not state.eager_no_sync and state.sync_enabled()

    state.buffer_hook = (torch.compiler.disable(pre_forward), torch.compiler.disable(post_forward))
    state.hook_handles["buffers"] = _register(state.module, state.buffer_hook)


def _register(module: torch.nn.Module, hooks) -> list:
    pre, post = hooks
    return [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]


@torch.no_grad()
def _broadcast(buffers: list[torch.Tensor], src: int, group) -> None:
    for b in buffers:
        dist.broadcast(b, src, group=group)


def move_buffer_broadcast(state: DistState, thunder_module: torch.nn.Module) -> None:
    """Moves the buffer broadcast from the inner module to the ``ThunderModule`` that runs it."""
    handles = state.hook_handles.pop("buffers", ())
    for h in handles:
        h.remove()
    if handles:
        state.hook_handles["buffers"] = _register(thunder_module, state.buffer_hook)


def _unique_buffers(module: torch.nn.Module) -> list[torch.Tensor]:
    seen: set[int] = set()
    out = []
    for b in module.buffers():
        if id(b) not in seen:
            seen.add(id(b))
            out.append(b)
    return out
