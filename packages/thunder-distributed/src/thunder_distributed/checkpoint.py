"""The state dict of an ``fsdp`` module: sharded parameters as ``DTensor``\\ s, so PyTorch's checkpointing understands them.

``fsdp`` keeps each parameter as this rank's rows of dim 0, padded to the same number of rows
on every rank. Its rows are exactly those of ``DTensor``'s ``Shard(0)`` placement (``torch.chunk``
sizes: ``ceil(rows / world)`` per rank, the last ones shorter or empty), so the state dict gives,
for each sharded parameter, a ``DTensor`` on a one-dimensional ``DeviceMesh`` over the group,
whose local tensor is the unpadded part of the shard (a view of the parameter: loading in place
updates it). Then

- ``torch.distributed.checkpoint`` (DCP) saves each rank's rows under the full shape and, on
  load, gives every rank its own rows, whatever the world size the checkpoint was saved at;
- ``torch.distributed.checkpoint.state_dict.get_model_state_dict`` /
  ``set_model_state_dict`` (full or sharded, ``cpu_offload``) give and take full shapes.

Loading (``load_state_dict``) accepts, for a sharded parameter, such a ``DTensor`` (any
sharding: it is redistributed), the full tensor (each rank keeps its rows) or this rank's padded
shard.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

from thunder_distributed.fsdp import ShardLayout, shard_tensor
from thunder_distributed.optimizer_state import install_optimizer_hook, register_shard

__all__ = ["get_model_state_dict", "load_model_state_dict", "install_dtensor_state_dict"]


def _inner(module: torch.nn.Module) -> tuple[torch.nn.Module, Any]:
    import thunder

    inner = module._model if isinstance(module, thunder.ThunderModule) else module
    return inner, getattr(inner, "_thunder_distributed", None)


def _local_rows(layout: ShardLayout, rank: int) -> int:
    """How many of this rank's ``rows_per_rank`` rows are real (not padding)."""
    return max(0, min(layout.rows_per_rank, layout.rows - rank * layout.rows_per_rank))


def contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (a DTensor's global layout)."""
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(stride))


def install_dtensor_state_dict(state) -> None:
    """Makes the module's ``state_dict`` give sharded parameters as ``DTensor``\\ s and its ``load_state_dict`` take them."""
    from torch.distributed.device_mesh import DeviceMesh

    module = state.module
    layouts: dict[str, ShardLayout] = state.options["layouts"]
    by_id = {id(p): layouts[n] for n, p in module.named_parameters() if n in layouts}
    # every name of a sharded parameter (a shared parameter appears under each of its names)
    sharded = {n: by_id[id(p)] for n, p in module.named_parameters(remove_duplicate=False) if id(p) in by_id}
    device_type = next(iter(module.parameters())).device.type
    mesh = DeviceMesh.from_group(state.group, device_type)
    state.options["mesh"] = mesh

    # parameters tensor_parallel split before fsdp sharded them: 2-D DTensors (tp, dp), see tensor_parallel_state_dict
    tp_state = getattr(module, "_thunder_tensor_parallel", None)
    tp_layouts = tp_state.layouts if tp_state is not None else {}
    if tp_layouts:
        from thunder_distributed.tensor_parallel_state_dict import _tp_dp_mesh, dtensor_of_fsdp_shard

        _tp_dp_mesh(tp_state, state.group, device_type)  # made now, while every rank runs fsdp()

    def to_dtensors(module, state_dict, prefix, local_metadata) -> None:
        for name, layout in sharded.items():
            key = prefix + name
            value = state_dict.get(key)
            if value is None or isinstance(value, DTensor):
                continue
            if name in tp_layouts:
                shard = value.detach()
                state_dict[key] = dtensor_of_fsdp_shard(
                    shard[: _local_rows(layout, state.rank)],
                    shard,
                    tp_layouts[name],
                    tp_state,
                    state,
                    lambda s, layout=layout: _gather(s, layout, state),
                )
                continue
            state_dict[key] = _as_dtensor(value.detach(), layout, state, mesh)

    def from_dtensors(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
        for name, layout in sharded.items():
            key = prefix + name
            value = state_dict.get(key)
            if value is not None:
                state_dict[key] = _as_padded_shard(key, value, layout, state)

    for name, p in module.named_parameters():
        if name in tp_layouts:
            from thunder_distributed.optimizer_state import register_converters
            from thunder_distributed.tensor_parallel_state_dict import fsdp_optimizer_converters

            converters = fsdp_optimizer_converters(
                name,
                layouts[name],
                tp_layouts[name],
                tp_state,
                state,
                lambda s, layout=layouts[name]: _gather(s, layout, state),
                _as_padded_shard,
            )
            register_converters(p, *converters)
        elif name in layouts:
            register_shard(p, layouts[name], state)
    install_optimizer_hook()  # optimizers over the shards give their state as DTensors too
    state.hook_handles["state_dict"] = [
        module.register_state_dict_post_hook(to_dtensors),
        module.register_load_state_dict_pre_hook(from_dtensors),
    ]


def _as_dtensor(shard: torch.Tensor, layout: ShardLayout, state, mesh) -> torch.Tensor:
    if not layout.shape:  # a 0-d parameter (stored as one row): every rank has it after a gather
        return _gather(shard, layout, state)
    local = shard[: _local_rows(layout, state.rank)]
    return DTensor.from_local(
        local,
        mesh,
        [Shard(0)],
        run_check=False,
        shape=torch.Size(layout.shape),
        stride=contiguous_stride(layout.shape),
    )


def _as_padded_shard(key: str, value: torch.Tensor, layout: ShardLayout, state) -> torch.Tensor:
    padded_shape = (layout.rows_per_rank, *layout.shape[1:])
    if isinstance(value, DTensor):
        if tuple(value.shape) != layout.shape:
            raise ValueError(f"load_state_dict: {key!r} has shape {tuple(value.shape)}, the parameter {layout.shape}")
        same = (
            value.placements == (Shard(0),)
            and value.device_mesh.size() == state.world_size
            and value.device_mesh.get_rank() == dist.get_rank()
            and value.to_local().shape[0] == _local_rows(layout, state.rank)
        )
        if not same:  # another sharding: every rank takes part in gathering it
            value = value.full_tensor()
        else:
            local = value.to_local()
            pad = layout.rows_per_rank - local.shape[0]
            return torch.cat([local, local.new_zeros((pad, *local.shape[1:]))]) if pad else local
    if tuple(value.shape) == layout.shape:  # the full tensor: keep this rank's rows
        return shard_tensor(value, state.rank, state.world_size)[0]
    if tuple(value.shape) == padded_shape:  # already this rank's (padded) shard
        return value
    raise ValueError(
        f"load_state_dict: {key!r} has shape {tuple(value.shape)}; expected the full shape {layout.shape}, "
        f"a DTensor of it, or this rank's shard {padded_shape}"
    )


def _gather(shard: torch.Tensor, layout: ShardLayout, state) -> torch.Tensor:
    from thunder_distributed.ops import _all_gather_fn

    world = state.world_size
    gathered = torch.empty((world * shard.shape[0], *shard.shape[1:]), dtype=shard.dtype, device=shard.device)
    _all_gather_fn(gathered, shard.contiguous(), group=state.group)
    return gathered[: layout.rows].reshape(layout.shape)


@torch.no_grad()
def get_model_state_dict(
    module: torch.nn.Module,
    *,
    full_state_dict: bool = True,
    cpu_offload: bool = False,
    rank0_only: bool = False,
) -> dict[str, torch.Tensor]:
    """The module's state dict: full tensors (gathered from the shards) or ``DTensor`` shards.

    With ``full_state_dict=True`` every rank must call it (the shards are all-gathered); the keys
    and shapes are those of the module before ``fsdp``. ``rank0_only`` returns an empty dict on
    the other ranks; ``cpu_offload`` moves the tensors to the CPU. With ``full_state_dict=False``
    it is ``module.state_dict()``: sharded parameters as ``DTensor``\\ s (``Shard(0)``). For
    ``ddp`` modules and modules not prepared by thunder.distributed both give ``module.state_dict()``.
    """
    inner, state = _inner(module)
    is_rank0 = state is None or state.rank == 0
    out: dict[str, torch.Tensor] = {}
    for key, value in inner.state_dict().items():
        if full_state_dict and isinstance(value, DTensor):
            value = value.full_tensor()
        if full_state_dict and rank0_only and not is_rank0:
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
    """Loads a full or sharded state dict into the module, in place (``module.load_state_dict``).

    A sharded parameter takes a full tensor (each rank keeps its rows), a ``DTensor`` (as from
    ``get_model_state_dict(full_state_dict=False)`` or DCP, any sharding) or this rank's padded
    shard. The parameters keep their identity, so an optimizer created before loading stays valid.
    ``full_state_dict`` is accepted for symmetry with :func:`get_model_state_dict`; the form of
    each value decides.
    """
    inner, _ = _inner(module)
    return inner.load_state_dict(state_dict, strict=strict)
