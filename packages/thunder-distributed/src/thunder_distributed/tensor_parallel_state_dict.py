"""The state dict of a ``tensor_parallel`` module: split parameters as ``DTensor``\\ s with their full shapes.

Each split parameter is stored as this rank's slice; in ``module.state_dict()`` it becomes

- with tensor parallelism alone: a ``DTensor`` on a 1-D ``DeviceMesh`` over the tensor-parallel
  group, ``Shard(0)`` (colwise weight and bias, vocab-parallel embedding) or ``Shard(1)`` (rowwise
  weight);
- with ``fsdp`` over the slices as well: a ``DTensor`` on a 2-D mesh (tp, dp) with ``Shard(d)`` on
  tp and ``Shard(0)`` on dp (fsdp's rows of this rank's slice), built by fsdp's state-dict hook
  (:func:`dtensor_of_fsdp_shard`);
- LitGPT's fused qkv (three sections, which no ``DTensor`` placement describes): the full tensor,
  the same on every rank (all ranks must call ``state_dict``).

So ``torch.distributed.checkpoint`` saves and loads them at their full shapes (no rank's slice is
mistaken for a replicated copy), and the state dict loads into the plain model. ``load_state_dict``
takes, for a split parameter, a ``DTensor`` of any sharding, the full tensor or this rank's slice.
An optimizer over the split parameters gives its per-parameter state (Adam's moments) the same
way in ``optimizer.state_dict()`` and takes it back, so ``get/set_optimizer_state_dict`` and DCP
handle it too.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

from thunder_distributed.checkpoint import contiguous_stride
from thunder_distributed.optimizer_state import install_optimizer_hook, register_converters

__all__ = ["install_tensor_parallel_state_dict", "dtensor_of_fsdp_shard", "fsdp_optimizer_converters"]


def _full_from_slice(local: torch.Tensor, layout, group) -> torch.Tensor:
    slices = [torch.empty_like(local) for _ in range(layout.size)]
    dist.all_gather(slices, local.contiguous(), group=group)
    return layout.full(slices)


def install_tensor_parallel_state_dict(module: torch.nn.Module, state) -> None:
    """Makes ``module.state_dict()`` give the split parameters at their full shapes and ``load_state_dict`` take them."""
    from torch.distributed.device_mesh import DeviceMesh

    device_type = next(iter(module.parameters())).device.type
    state.mesh = DeviceMesh.from_group(state.group, device_type)

    def to_global(module, state_dict, prefix, local_metadata) -> None:
        if getattr(module, "_thunder_distributed", None) is not None:
            return  # fsdp shards the slices further: its hook gives the 2-D DTensors
        for name, layout in state.layouts.items():
            key = prefix + name
            value = state_dict.get(key)
            if value is None or isinstance(value, DTensor):
                continue
            state_dict[key] = _global_of_slice(value.detach(), layout, state)

    def to_local(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
        # runs before fsdp's pre-hook (registered first): fsdp then takes this rank's slice as its full tensor
        for name, layout in state.layouts.items():
            key = prefix + name
            value = state_dict.get(key)
            if value is not None:
                state_dict[key] = _local_slice(key, value, layout, state)

    state.hook_handles = [
        module.register_state_dict_post_hook(to_global),
        module.register_load_state_dict_pre_hook(to_local),
    ]
    # optimizers over the slices give their state (Adam's moments) the same way (fsdp replaces this when it shards)
    for name, p in module.named_parameters():
        if name in state.layouts:
            register_converters(p, *_optimizer_converters(name, state.layouts[name], state))
    install_optimizer_hook()


def _global_of_slice(value: torch.Tensor, layout, state) -> torch.Tensor:
    """This rank's slice as a ``DTensor`` of the full shape (``Shard(dim)`` on the group's mesh), or the full tensor."""
    if len(layout.sections) > 1:
        return _full_from_slice(value, layout, state.group)
    return DTensor.from_local(
        value,
        state.mesh,
        [Shard(layout.dim)],
        run_check=False,
        shape=torch.Size(layout.shape),
        stride=contiguous_stride(layout.shape),
    )


def _local_shape(layout) -> tuple[int, ...]:
    shape = list(layout.shape)
    shape[layout.dim] //= layout.size
    return tuple(shape)


def _is_state_tensor(value, name: str) -> bool:
    return isinstance(value, torch.Tensor) and name != "step"


def _optimizer_converters(param_name: str, layout, state):
    """``(to_global, to_local)`` for the optimizer state of a split parameter (tensor parallelism alone)."""

    def to_global(value, name: str):
        if (
            _is_state_tensor(value, name)
            and not isinstance(value, DTensor)
            and tuple(value.shape) == _local_shape(layout)
        ):
            return _global_of_slice(value, layout, state)
        return value

    def to_local(value, name: str):
        if _is_state_tensor(value, name) and (isinstance(value, DTensor) or tuple(value.shape) == layout.shape):
            return _local_slice(f"optimizer state {name!r} of {param_name!r}", value, layout, state)
        return value

    return to_global, to_local


def fsdp_optimizer_converters(param_name: str, fsdp_layout, tp_layout, tp_state, fsdp_state, gather, as_padded_shard):
    """``(to_global, to_local)`` for the optimizer state of a split parameter fsdp shards further: 2-D DTensors."""
    from thunder_distributed.checkpoint import _local_rows

    padded = (fsdp_layout.rows_per_rank, *fsdp_layout.shape[1:])

    def to_global(value, name: str):
        if _is_state_tensor(value, name) and not isinstance(value, DTensor) and tuple(value.shape) == padded:
            local = value[: _local_rows(fsdp_layout, fsdp_state.rank)]
            return dtensor_of_fsdp_shard(local, value, tp_layout, tp_state, fsdp_state, gather)
        return value

    def to_local(value, name: str):
        if _is_state_tensor(value, name) and (isinstance(value, DTensor) or tuple(value.shape) == tp_layout.shape):
            what = f"optimizer state {name!r} of {param_name!r}"
            return as_padded_shard(what, _local_slice(what, value, tp_layout, tp_state), fsdp_layout, fsdp_state)
        return value

    return to_global, to_local


def _local_slice(key: str, value: torch.Tensor, layout, state) -> torch.Tensor:
    if isinstance(value, DTensor):
        same = (
            len(layout.sections) == 1
            and value.device_mesh == state.mesh
            and tuple(value.placements) == (Shard(layout.dim),)
            and tuple(value.shape) == layout.shape
        )
        if same:
            return value.to_local()
        value = value.full_tensor()  # another sharding: every rank takes part in gathering it
    if tuple(value.shape) == layout.shape:  # the full tensor: this rank's slice of it
        return layout.local(value, state.rank)
    local_shape = _local_shape(layout)
    if tuple(value.shape) == local_shape:  # already this rank's slice
        return value
    raise ValueError(
        f"load_state_dict: {key!r} has shape {tuple(value.shape)}; expected the full shape {layout.shape}, a DTensor "
        f"of it, or this rank's tensor-parallel slice {local_shape}"
    )


def _tp_dp_mesh(tp_state, dp_group, device_type: str):
    """The 2-D mesh (tp, dp) over the tensor-parallel and fsdp groups, or ``None`` if they do not tile the world."""
    from torch.distributed.device_mesh import DeviceMesh

    mesh = getattr(tp_state, "tp_dp_mesh", None)
    if mesh is not None:
        return mesh
    coords = [None] * dist.get_world_size()
    dist.all_gather_object(coords, (tp_state.rank, dist.get_rank(dp_group)))
    dp_size = dist.get_world_size(dp_group)
    grid = torch.full((tp_state.size, dp_size), -1, dtype=torch.int64)
    for rank, (t, d) in enumerate(coords):
        grid[t, d] = rank
    if (grid < 0).any() or len(coords) != tp_state.size * dp_size:
        mesh = False
    else:
        mesh = DeviceMesh.from_group([tp_state.group, dp_group], device_type, mesh=grid, mesh_dim_names=("tp", "dp"))
    tp_state.tp_dp_mesh = mesh
    return mesh


def dtensor_of_fsdp_shard(local_rows: torch.Tensor, padded_shard: torch.Tensor, layout, tp_state, fsdp_state, gather):
    """What fsdp's state dict gives for a split parameter it shards further: a 2-D ``DTensor`` (tp, dp), or the full tensor.

    ``local_rows`` are the real rows of fsdp's ``padded_shard`` of this rank's slice; ``gather``
    turns the padded shard into the whole slice (fsdp's all-gather).
    """
    mesh = _tp_dp_mesh(tp_state, fsdp_state.group, local_rows.device.type) if len(layout.sections) == 1 else False
    if not mesh:
        return _full_from_slice(gather(padded_shard), layout, tp_state.group)
    placements = [Shard(layout.dim), Shard(0)]
    return DTensor.from_local(
        local_rows,
        mesh,
        placements,
        run_check=False,
        shape=torch.Size(layout.shape),
        stride=contiguous_stride(layout.shape),
    )
