"""Deferred initialisation: ``fsdp`` of a model built on the ``meta`` device.

A model built under ``with torch.device("meta"):`` has parameters without storage, so a model
larger than one rank's memory can be described. ``fsdp`` then walks its submodules in
``modules()`` order; for each one holding meta parameters or buffers it allocates them (its own,
not its children's) on the rank's device, initialises them with ``param_init_fn(submodule)``
(default: the submodule's ``reset_parameters()``) and replaces each parameter by this rank's
shard right away, so at most one submodule's full parameters exist at a time on a rank.

Every rank runs the same initialisation from the same random state (rank ``broadcast_from``'s,
sent to the others first), so the shards are those of one model initialised on one process with
that seed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.distributed as dist

from thunder_distributed.fsdp import ModuleSharder

__all__ = ["has_meta_tensors", "materialize_and_shard"]


def has_meta_tensors(module: torch.nn.Module) -> bool:
    """Whether any parameter or buffer of ``module`` is on the meta device."""
    return any(t.is_meta for t in [*module.parameters(), *module.buffers()])


def _reset_parameters(qualname: str, module: torch.nn.Module) -> None:
    reset = getattr(module, "reset_parameters", None)
    if not callable(reset):
        raise ValueError(
            f"thunder.distributed.fsdp: submodule {qualname or '<root>'!r} ({type(module).__name__}) has tensors on the "
            "meta device but no reset_parameters() to initialise them; pass param_init_fn=... (called with each "
            "submodule whose own parameters and buffers were just allocated)"
        )
    reset()


@torch.no_grad()
def _share_random_state(group, src_rank: int, device: torch.device) -> None:
    """Every rank continues from rank ``src_rank``'s random state (of ``device``'s generator)."""
    src = dist.get_global_rank(group, src_rank) if group is not dist.group.WORLD else src_rank
    if device.type == "cuda":
        state = torch.cuda.get_rng_state(device).to(device)
        dist.broadcast(state, src, group=group)
        torch.cuda.set_rng_state(state.cpu(), device)
    else:
        state = torch.get_rng_state()
        comm = state.to("cuda") if dist.get_backend(group) == "nccl" else state
        dist.broadcast(comm, src, group=group)
        torch.set_rng_state(comm.cpu())


def materialize_and_shard(
    module: torch.nn.Module,
    device: torch.device,
    group,
    broadcast_from: int | None,
    param_init_fn: Callable[[torch.nn.Module], None] | None,
    sharder: ModuleSharder | None,
) -> None:
    """Allocates and initialises ``module``'s meta tensors one submodule at a time, sharding each right after.

    ``sharder`` replaces each submodule's own parameters by shards (``None`` in a world of one).
    Tensors already off the meta device are left as they are.
    """
    if broadcast_from is not None and dist.get_world_size(group) > 1:
        _share_random_state(group, broadcast_from, device)
    names = {id(p): n for n, p in module.named_parameters()}
    done: dict[int, torch.nn.Parameter] = {}  # id of a meta parameter -> what replaced it (shared parameters)
    name_of: dict[int, str] = {}
    for qualname, m in module.named_modules():
        fresh: dict[str, int] = {}  # key -> id of the meta parameter it replaces
        for key, p in list(m._parameters.items()):
            if p is None or not p.is_meta:
                continue
            if id(p) in done:
                m._parameters[key] = done[id(p)]
                continue
            full = torch.nn.Parameter(torch.empty_like(p, device=device), p.requires_grad)
            name_of[id(full)] = names[id(p)]
            m._parameters[key] = full
            fresh[key] = id(p)
        buffers = False
        for key, b in list(m._buffers.items()):
            if b is not None and b.is_meta:
                m._buffers[key] = torch.empty_like(b, device=device)
                buffers = True
        if fresh or buffers:
            if param_init_fn is not None:
                param_init_fn(m)
            else:
                _reset_parameters(qualname, m)
        if sharder is not None:
            sharder.shard_own_parameters(m, name_of)
            sharder.forget_originals()  # the full parameters are freed now
        for key, meta_id in fresh.items():
            done[meta_id] = m._parameters[key]
    module.to(device)  # what was not on the meta device
