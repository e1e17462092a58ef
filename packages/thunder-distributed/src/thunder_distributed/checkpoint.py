"""Saving and loading the state of a ``ddp``/``fsdp`` module: full (gathered) or sharded."""

from __future__ import annotations

from typing import Any

import torch

from thunder_distributed.fsdp import shard_tensor
from thunder_distributed.ops import _all_gather_fn

__all__ = ["get_model_state_dict", "load_model_state_dict"]


def _inner(module: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
    import thunder

    inner = module._model if isinstance(module, thunder.ThunderModule) else module
    return inner, getattr(inner, "_thunder_distributed", None)


def _sharded_ids(inner: torch.nn.Module, state) -> dict[int, Any]:
    if state is None or state.kind != "fsdp":
        return {}
    layouts = state.options["layouts"]
    return {id(p): layouts[n] for n, p in inner.named_parameters() if n in layouts}


@torch.no_grad()
def get_model_state_dict(
    module: torch.nn.Module,
    *,
    full_state_dict: bool = True,
    cpu_offload: bool = False,
    rank0_only: bool = False,
) -> dict[str, torch.Tensor]:
    """The module's state dict: full tensors (gathered from the shards) or this rank's shards.

    With ``full_state_dict=True`` every rank must call it (the shards are all-gathered); the keys
    and shapes are those of the module before ``fsdp``. ``rank0_only`` returns an empty dict on
    the other ranks; ``cpu_offload`` moves the tensors to the CPU. With ``full_state_dict=False``
    it is ``module.state_dict()`` (shards under the original names). For ``ddp`` modules and
    modules not prepared by thunder.distributed both give ``module.state_dict()`` (detached).
    """
    inner, state = _inner(module)
    sharded = _sharded_ids(inner, state)
    out: dict[str, torch.Tensor] = {}
    is_rank0 = state is None or state.rank == 0
    for key, t in inner.state_dict(keep_vars=True).items():
        layout = sharded.get(id(t)) if full_state_dict else None
        if layout is not None:
            world = state.world_size
            gathered = torch.empty((world * t.shape[0], *t.shape[1:]), dtype=t.dtype, device=t.device)
            _all_gather_fn(gathered, t.detach().contiguous(), group=state.group)
            value = gathered[: layout.rows].reshape(layout.shape)
        else:
            value = t.detach()
        if rank0_only and not is_rank0:
            continue
        out[key] = value.cpu() if cpu_offload else value.clone()
    return out


@torch.no_grad()
def load_model_state_dict(
    module: torch.nn.Module,
    state_dict: dict[str, torch.Tensor],
    *,
    full_state_dict: bool = True,
    strict: bool = True,
):
    """Loads a state dict saved by :func:`get_model_state_dict` (full or sharded) into the module, in place.

    A full state dict is sharded the way ``fsdp`` shards (each rank keeps its rows); a sharded
    one must come from the same rank and world size. The parameters keep their identity, so an
    optimizer created before loading stays valid.
    """
    inner, state = _inner(module)
    sharded = _sharded_ids(inner, state)
    current = inner.state_dict(keep_vars=True)
    local = {}
    for key, value in state_dict.items():
        t = current.get(key)
        layout = sharded.get(id(t)) if (t is not None and full_state_dict) else None
        if layout is not None:
            if tuple(value.shape) != layout.shape:
                raise ValueError(
                    f"load_model_state_dict: {key!r} has shape {tuple(value.shape)}, expected the full shape "
                    f"{layout.shape} (pass full_state_dict=False to load shards)"
                )
            value, _ = shard_tensor(value.to(t.device), state.rank, state.world_size)
        local[key] = value
    return inner.load_state_dict(local, strict=strict)
