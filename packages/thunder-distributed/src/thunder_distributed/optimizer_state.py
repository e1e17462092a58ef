"""Optimizer state of an ``fsdp`` module in PyTorch's checkpointing: per-parameter state as ``DTensor`` shards.

An optimizer over ``fsdp`` shards keeps, per sharded parameter, state of the shard's (padded)
shape (Adam's ``exp_avg``...). PyTorch's ``get_optimizer_state_dict``/``set_optimizer_state_dict``
and ``torch.distributed.checkpoint`` understand sharded state only as ``DTensor``\\ s. So every
optimizer stepping ``fsdp`` shards gets, at its first step (``set_optimizer_state_dict`` takes one
on a fresh optimizer too), two hooks:

- ``state_dict()`` gives such state as a ``DTensor`` (``Shard(0)``, the parameter's full shape),
  as the module's state dict does for the parameter itself; full or sharded, at any world size;
- ``load_state_dict()`` takes a ``DTensor`` (any sharding), the full tensor, or the padded shard.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from functools import partial
from itertools import chain

import torch
from torch.distributed.tensor import DTensor
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["register_shard", "register_converters", "install_optimizer_hook"]

#: shard parameter -> (to_global(value, name), to_local(value, name)): its optimizer state in and out of state dicts
_shards: WeakIdKeyDictionary = WeakIdKeyDictionary()
_prepared: weakref.WeakSet = weakref.WeakSet()
_hook_handle = None


def register_shard(param: torch.nn.Parameter, layout, state) -> None:
    """Records that ``param`` is an fsdp shard (so optimizers over it give DTensor state)."""
    _shards[param] = (
        partial(_to_dtensor, layout=layout, state=state),
        partial(_from_dtensor, layout=layout, state=state),
    )


def register_converters(param: torch.nn.Parameter, to_global: Callable, to_local: Callable) -> None:
    """Records how ``param``'s optimizer state is given in state dicts (``to_global(value, name)``) and taken back
    (``to_local(value, name)``); tensor_parallel registers its split parameters so (replacing fsdp's registration
    when fsdp shards them further)."""
    _shards[param] = (to_global, to_local)


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return list(chain.from_iterable(g["params"] for g in optimizer.param_groups))


def _convert_state(optimizer, state_dict, direction: int) -> dict:
    """``state_dict`` with new per-parameter dicts where a registered converter changed a value (``direction`` 0:
    ``to_global``, 1: ``to_local``).

    A state dict names parameters by index (``Optimizer.state_dict``) or by FQN (PyTorch's
    ``set_optimizer_state_dict``); its ``param_groups`` list them in the optimizer's order.
    """
    param_of = {}
    for saved, group in zip(state_dict.get("param_groups", ()), optimizer.param_groups):
        param_of.update(zip(saved.get("params", ()), group["params"]))
    new_state = {}
    for key, per_param in state_dict["state"].items():
        converters = _shards.get(param_of[key]) if key in param_of else None
        if converters is not None:
            per_param = {name: converters[direction](value, name) for name, value in per_param.items()}
        new_state[key] = per_param
    return {**state_dict, "state": new_state}


def _to_dtensor(value, name: str, *, layout, state):
    from thunder_distributed.checkpoint import _as_dtensor

    if isinstance(value, torch.Tensor) and not isinstance(value, DTensor):
        if tuple(value.shape) == (layout.rows_per_rank, *layout.shape[1:]) and name != "step":
            return _as_dtensor(value, layout, state, state.options["mesh"])
    return value


def _from_dtensor(value, name: str, *, layout, state):
    from thunder_distributed.checkpoint import _as_padded_shard

    if isinstance(value, DTensor) or (
        isinstance(value, torch.Tensor) and tuple(value.shape) == layout.shape and name != "step"
    ):
        return _as_padded_shard(f"optimizer state {name!r}", value, layout, state)
    return value


def _to_dtensors(optimizer, state_dict) -> dict:
    return _convert_state(optimizer, state_dict, 0)


def _from_dtensors(optimizer, state_dict) -> dict:
    return _convert_state(optimizer, state_dict, 1)


def _prepare(optimizer: torch.optim.Optimizer, args, kwargs) -> None:
    if optimizer in _prepared:
        return
    _prepared.add(optimizer)
    if any(p in _shards for p in _params(optimizer)):
        optimizer.register_state_dict_post_hook(_to_dtensors)
        optimizer.register_load_state_dict_pre_hook(_from_dtensors)


def install_optimizer_hook() -> None:
    """Once per process: a global optimizer step pre-hook prepares each optimizer at its first step."""
    global _hook_handle
    if _hook_handle is None:
        _hook_handle = register_optimizer_step_pre_hook(_prepare)
