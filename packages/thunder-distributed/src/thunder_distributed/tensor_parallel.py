"""Tensor parallelism (Megatron-style): linear layers and embeddings split across a group of ranks.

``tensor_parallel(model, plan)`` replaces the parameters of the modules the plan names by this
rank's slice of them and makes those modules call two communication operators, which tracing
records into the trace as ``tensor_parallel_copy`` and ``tensor_parallel_reduce`` (each with its
conjugate gradient rule):

- ``"colwise"`` ``Linear``: this rank holds rows ``rank * n : (rank + 1) * n`` of the weight (and
  bias), i.e. a slice of the output features; its input goes through ``tensor_parallel_copy``
  (identity forward, gradient all-reduced (summed) over the group), its output is this rank's
  slice of the full output's last dim.
- ``"rowwise"`` ``Linear``: this rank holds a slice of the weight's columns (input features); it
  takes the slice of its input's last dim a colwise layer produced, and its partial output goes
  through ``tensor_parallel_reduce`` (all-reduce forward, identity gradient); the bias (whole on
  every rank) is added after the reduction.
- ``"vocab"`` ``Embedding``: this rank holds a slice of the rows (token ids); ids outside it look
  up zeros, and the partial embeddings are all-reduced.
- ``"qkv"``: LitGPT's fused query/key/value ``Linear`` (``CausalSelfAttention.qkv``): colwise with
  the attention heads split across the ranks. Its rows are three sections (queries of ``n_head``
  heads, keys and values of ``n_query_groups`` groups); each rank takes its slice of each section,
  and the attention module computes with ``n_head / size`` heads and ``n_query_groups / size``
  groups.

:func:`litgpt_plan` gives the plan for a LitGPT ``GPT``: attention (``qkv`` heads split, ``proj``
rowwise), the MLP (``fc``/``fc_1``/``fc_2`` colwise, ``proj`` rowwise) and the token embedding
(vocab). Every rank of the group must see the same input. With ``fsdp`` over the other dimension
of a 2-D ``DeviceMesh`` (``fsdp(tensor_parallel(model, plan, mesh["tp"]),
process_group=mesh["dp"].get_group())``) FSDP shards these slices further. In state dicts the split
parameters (and an optimizer's state of them) have their full shapes: see ``tensor_parallel_state_dict``.
"""

from __future__ import annotations

import copy
import fnmatch
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from thunder.core.proxies import TensorProxy
from thunder_distributed._common import broadcast_module, check_same_device, resolve_group, target_device
from thunder_distributed.ops import dist_ex
from thunder_distributed.tensor_parallel_state_dict import install_tensor_parallel_state_dict

__all__ = [
    "tensor_parallel",
    "litgpt_plan",
    "TensorParallelLayout",
    "copy_to_tensor_parallel",
    "reduce_from_tensor_parallel",
    "tensor_parallel_copy",
    "tensor_parallel_reduce",
]

STYLES = ("colwise", "rowwise", "vocab", "qkv")


# --------------------------------------------------------------------------- the two collectives


def _all_reduce_sum(a: torch.Tensor, group) -> torch.Tensor:
    out = a.detach().clone(memory_format=torch.contiguous_format)
    dist.all_reduce(out, group=group)
    return out


class _CopyToParallel(torch.autograd.Function):
    """Eager ``tensor_parallel_copy``: identity forward, gradient summed over the group."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce_sum(grad, ctx.group), None


class _ReduceFromParallel(torch.autograd.Function):
    """Eager ``tensor_parallel_reduce``: forward summed over the group, identity gradient."""

    @staticmethod
    def forward(ctx, x, group):
        return _all_reduce_sum(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tensor_parallel(x: torch.Tensor, group) -> torch.Tensor:
    """``x`` unchanged; its gradient is the sum of the gradients of every rank in ``group`` (traced as ``tensor_parallel_copy``)."""
    return _CopyToParallel.apply(x, group)


def reduce_from_tensor_parallel(x: torch.Tensor, group) -> torch.Tensor:
    """The sum of ``x`` over the ranks of ``group``; the gradient passes unchanged (traced as ``tensor_parallel_reduce``)."""
    return _ReduceFromParallel.apply(x, group)


def _same_meta(x: TensorProxy, group) -> TensorProxy:
    return TensorProxy(like=x)


def _copy_impl(x: torch.Tensor, group) -> torch.Tensor:
    return x


#: the identity whose gradient is all-reduced: where a colwise layer takes its (replicated) input
tensor_parallel_copy = dist_ex.register_operator(
    "tensor_parallel_copy", meta=_same_meta, fn=_copy_impl, replaces=copy_to_tensor_parallel
)
#: the all-reduce (sum) of the partial results of a rowwise layer or a vocab-parallel embedding
tensor_parallel_reduce = dist_ex.register_operator(
    "tensor_parallel_reduce", meta=_same_meta, fn=_all_reduce_sum, replaces=reduce_from_tensor_parallel
)


def _copy_grad(x, group):
    from thunder.core.transforms import get_grad, put_grad

    out = tensor_parallel_copy(x, group)
    put_grad(x, tensor_parallel_reduce(get_grad(out), group))
    return out


def _reduce_grad(x, group):
    from thunder.core.transforms import get_grad, put_grad

    out = tensor_parallel_reduce(x, group)
    put_grad(x, get_grad(out))
    return out


dist_ex.register_implementation(tensor_parallel_copy, tensor_parallel_copy, grad_transform=_copy_grad)
dist_ex.register_implementation(tensor_parallel_reduce, tensor_parallel_reduce, grad_transform=_reduce_grad)


# --------------------------------------------------------------------------- how a parameter is split


@dataclass(frozen=True)
class TensorParallelLayout:
    """How one parameter is split: along ``dim``, each of ``sections`` (sizes along ``dim``) cut into ``size`` equal slices.

    A rank's slice is the concatenation of its slice of each section (one section: a plain
    ``torch.chunk``; LitGPT's fused qkv: three).
    """

    shape: tuple[int, ...]
    dim: int
    sections: tuple[int, ...]
    size: int

    def local(self, full: torch.Tensor, rank: int) -> torch.Tensor:
        """This rank's slice of the full tensor."""
        parts, offset = [], 0
        for n in self.sections:
            step = n // self.size
            parts.append(full.narrow(self.dim, offset + rank * step, step))
            offset += n
        return torch.cat(parts, self.dim) if len(parts) > 1 else parts[0]

    def full(self, slices: list[torch.Tensor]) -> torch.Tensor:
        """The full tensor from every rank's slice (in rank order)."""
        pieces = [torch.split(s, [n // self.size for n in self.sections], self.dim) for s in slices]
        return torch.cat([p[i] for i in range(len(self.sections)) for p in pieces], self.dim)


class TensorParallelState:
    """What ``tensor_parallel`` set up: the group, this rank, and each split parameter's layout (by name)."""

    __slots__ = ("group", "rank", "size", "layouts", "plan", "mesh", "tp_dp_mesh", "hook_handles")

    def __init__(self, group, rank: int, size: int, layouts: dict[str, TensorParallelLayout], plan: dict[str, str]):
        self.group, self.rank, self.size = group, rank, size
        self.layouts = layouts
        self.plan = plan
        self.mesh: Any = None  # the 1-D DeviceMesh over the group (state dict DTensors)
        self.tp_dp_mesh: Any = None  # with fsdp over the slices: the 2-D mesh (tp, dp); False if none fits
        self.hook_handles: list = []

    def __repr__(self) -> str:
        return f"<thunder.distributed.tensor_parallel rank {self.rank} of {self.size}>"


# --------------------------------------------------------------------------- the parallel modules


class _ColwiseLinear:
    """Mixed into a colwise ``Linear``: the output is this rank's slice of the output features."""

    def forward(self, x):
        return F.linear(copy_to_tensor_parallel(x, self._tp_group), self.weight, self.bias)


class _RowwiseLinear:
    """Mixed into a rowwise ``Linear``: the input is a slice of the input features; partial outputs are summed."""

    def forward(self, x):
        out = reduce_from_tensor_parallel(F.linear(x, self.weight), self._tp_group)
        return out if self.bias is None else out + self.bias


class _VocabEmbedding:
    """Mixed into a vocab-parallel ``Embedding``: ids outside this rank's rows look up zeros; partial lookups are summed."""

    def forward(self, ids):
        start, rows = self._tp_vocab_start, self.weight.shape[0]
        outside = (ids < start) | (ids >= start + rows)
        local_ids = (ids - start).masked_fill(outside, 0)
        out = F.embedding(local_ids, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tensor_parallel(out, self._tp_group)


_MIXINS = {"colwise": _ColwiseLinear, "qkv": _ColwiseLinear, "rowwise": _RowwiseLinear, "vocab": _VocabEmbedding}
_parallel_classes: dict[tuple[type, type], type] = {}


def _parallel_class(cls: type, mixin: type) -> type:
    new = _parallel_classes.get((cls, mixin))
    if new is None:
        new = type(cls.__name__, (mixin, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _parallel_classes[(cls, mixin)] = new
    return new


# --------------------------------------------------------------------------- the plan


def litgpt_plan(model: torch.nn.Module) -> dict[str, str]:
    """The tensor-parallel plan for a LitGPT ``GPT``: attention heads, MLP and token embedding split.

    ``transformer.wte`` vocab-parallel; in every block ``attn.qkv`` as ``"qkv"`` (heads split),
    ``attn.proj`` rowwise, the MLP's ``fc``/``fc_1``/``fc_2`` colwise and ``proj`` rowwise. The final
    norm and ``lm_head`` stay whole on every rank.
    """
    names = {name for name, _ in model.named_modules()}
    plan = {"transformer.wte": "vocab"} if "transformer.wte" in names else {}
    for name in sorted(names):
        parent, _, leaf = name.rpartition(".")
        if parent.endswith(".attn"):
            style = {"qkv": "qkv", "proj": "rowwise"}.get(leaf)
        elif parent.endswith(".mlp"):
            style = {"fc": "colwise", "fc_1": "colwise", "fc_2": "colwise", "proj": "rowwise"}.get(leaf)
        else:
            style = None
        if style is not None:
            plan[name] = style
    if not plan:
        raise ValueError("thunder.distributed.litgpt_plan: the model has no LitGPT attention, MLP or transformer.wte")
    return plan


def _resolve_plan(module: torch.nn.Module, plan: dict[str, str]) -> dict[str, str]:
    """``{module name: style}`` for every module the plan's names (or ``fnmatch`` patterns) select."""
    if not isinstance(plan, dict) or not plan:
        raise TypeError(
            "thunder.distributed.tensor_parallel: plan must be a non-empty dict {module name or pattern: style}, "
            f"got {plan!r}"
        )
    names = [name for name, _ in module.named_modules() if name]
    resolved: dict[str, str] = {}
    for pattern, style in plan.items():
        if style not in STYLES:
            raise ValueError(
                f"thunder.distributed.tensor_parallel: plan[{pattern!r}] = {style!r} is not one of {', '.join(STYLES)}"
            )
        matched = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not matched:
            raise ValueError(f"thunder.distributed.tensor_parallel: plan entry {pattern!r} names no submodule")
        for n in matched:
            resolved[n] = style
    return resolved


def _check_module(name: str, m: torch.nn.Module, style: str, size: int, parent) -> tuple[int, tuple[int, ...]]:
    """The dim and sections the module's weight is split along, or a clear error naming it."""
    what = f"thunder.distributed.tensor_parallel: {name!r} ({type(m).__name__})"
    if style == "vocab":
        if not isinstance(m, torch.nn.Embedding):
            raise TypeError(f"{what}: style 'vocab' is for torch.nn.Embedding")
        if m.padding_idx is not None or m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
            raise ValueError(f"{what}: padding_idx, max_norm, scale_grad_by_freq and sparse are not supported")
        dim, sections = 0, (m.num_embeddings,)
    else:
        if not isinstance(m, torch.nn.Linear):
            raise TypeError(f"{what}: style {style!r} is for torch.nn.Linear")
        dim = 1 if style == "rowwise" else 0
        sections = (m.weight.shape[dim],)
        if style == "qkv":
            config = getattr(parent, "config", None)
            if config is None or not all(hasattr(config, a) for a in ("n_head", "n_query_groups", "head_size")):
                raise TypeError(
                    f"{what}: style 'qkv' is for LitGPT's CausalSelfAttention.qkv (its module has a config)"
                )
            if config.n_query_groups % size:
                raise ValueError(
                    f"{what}: {config.n_query_groups} query groups (n_query_groups) cannot be split across {size} ranks"
                )
            q, kv = config.n_head * config.head_size, config.n_query_groups * config.head_size
            if q + 2 * kv != m.out_features:
                raise ValueError(f"{what}: {m.out_features} outputs are not LitGPT's fused q, k, v ({q} + 2 x {kv})")
            sections = (q, kv, kv)
    for n in sections:
        if n % size:
            raise ValueError(f"{what}: size {n} along dim {dim} is not divisible by the tensor-parallel size {size}")
    return dim, sections


def tensor_parallel(
    model: torch.nn.Module,
    plan: dict[str, str],
    mesh_or_group: Any = None,
    *,
    broadcast_from: int | None = 0,
    device: torch.device | str | None = None,
) -> torch.nn.Module:
    """Tensor parallelism: splits the plan's linear layers and embeddings across a group of ranks.

    Use as ``thunder.jit(tensor_parallel(model, plan))``; it also runs without ``thunder.jit``. The
    module is moved to this rank's device (``cuda:LOCAL_RANK`` with NCCL, else the CPU), every rank
    starts from rank ``broadcast_from``'s parameters (of the group), then each planned module keeps
    its slice (see this module's docstring for the styles). Create the optimizer afterwards. The
    ranks of the group must be given the same inputs; their outputs and the gradients of the
    parameters that are not split are then the same on every rank.

    Args:
        model: an ``nn.Module`` (changed in place and returned).
        plan: ``{submodule name or fnmatch pattern: style}``, a style being ``"colwise"``,
            ``"rowwise"``, ``"vocab"`` or ``"qkv"``; :func:`litgpt_plan` gives LitGPT's.
        mesh_or_group: the ranks to split across: a process group, a 1-D ``DeviceMesh`` (for a 2-D
            mesh pass ``mesh["tp"]``), or ``None`` for the world.
        broadcast_from: the rank of the group whose parameters every rank starts from (``None``: leave them).
        device: where to compute (default: ``cuda:LOCAL_RANK`` with NCCL, else the CPU).

    Raises:
        RuntimeError: no process group is initialised.
        TypeError: the plan or a planned module is of the wrong kind; ``model`` is already sharded.
        ValueError: an unknown style, a plan entry naming no submodule, a size not divisible by the group size.
    """
    from torch.distributed.device_mesh import DeviceMesh

    import thunder

    if not isinstance(model, torch.nn.Module) or isinstance(model, thunder.ThunderModule):
        raise TypeError(
            "thunder.distributed.tensor_parallel expects a torch.nn.Module before thunder.jit, "
            f"got {type(model).__name__} (use thunder.jit(tensor_parallel(model, plan)))"
        )
    if getattr(model, "_thunder_distributed", None) is not None:
        raise TypeError(
            "thunder.distributed.tensor_parallel: apply it before ddp/fsdp (fsdp(tensor_parallel(model, plan), ...))"
        )
    if getattr(model, "_thunder_tensor_parallel", None) is not None:
        raise ValueError("thunder.distributed.tensor_parallel: this module was already split")
    if isinstance(mesh_or_group, DeviceMesh):
        if mesh_or_group.ndim != 1:
            raise ValueError(
                f"thunder.distributed.tensor_parallel: mesh_or_group is a {mesh_or_group.ndim}-D DeviceMesh; "
                "pass its tensor-parallel dimension (mesh['tp'])"
            )
        mesh_or_group = mesh_or_group.get_group()
    group, rank, size = resolve_group("tensor_parallel", mesh_or_group)
    resolved = _resolve_plan(model, plan)
    modules = dict(model.named_modules())
    checked = {
        name: _check_module(name, modules[name], style, size, modules.get(name.rpartition(".")[0]))
        for name, style in resolved.items()
    }
    planned_params = {id(p) for name in resolved for p in modules[name].parameters(recurse=False)}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in planned_params and name.rpartition(".")[0] not in resolved:
            raise ValueError(f"thunder.distributed.tensor_parallel: parameter {name!r} is shared with a split module")
    check_same_device("tensor_parallel", model)
    if any(t.is_meta for t in [*model.parameters(), *model.buffers()]):
        raise ValueError(
            "thunder.distributed.tensor_parallel: the model has tensors on the meta device; deferred initialisation "
            "is not supported with tensor parallelism yet: build the model on the CPU or GPU first"
        )
    model.to(target_device(group, device))
    if size > 1 and broadcast_from is not None:
        broadcast_module(model, group, broadcast_from)

    layouts: dict[str, TensorParallelLayout] = {}
    with torch.no_grad():
        for name, style in resolved.items():
            m = modules[name]
            dim, sections = checked[name]
            for key in ("weight", "bias"):
                p = getattr(m, key, None)
                if p is None or (style == "rowwise" and key == "bias"):
                    continue
                layout = TensorParallelLayout(tuple(p.shape), dim if key == "weight" else 0, sections, size)
                m._parameters[key] = torch.nn.Parameter(layout.local(p, rank).clone(), requires_grad=p.requires_grad)
                layouts[f"{name}.{key}"] = layout
            m._tp_group = group
            if style == "vocab":
                m._tp_vocab_start = rank * (m.num_embeddings // size)
                m.num_embeddings //= size
            elif style == "qkv":
                attention = modules[name.rpartition(".")[0]]
                local_config = copy.copy(attention.config)
                local_config.n_head //= size
                local_config.n_query_groups //= size
                attention.config = local_config
            elif style == "colwise":
                m.out_features //= size
            elif style == "rowwise":
                m.in_features //= size
            m.__class__ = _parallel_class(type(m), _MIXINS[style])
    state = TensorParallelState(group, rank, size, layouts, resolved)
    model._thunder_tensor_parallel = state
    install_tensor_parallel_state_dict(model, state)  # split parameters at their full shapes in state dicts
    setups = list(getattr(model, "_thunder_jit_setup", ()))
    setups.append(_add_communication_executor)
    model._thunder_jit_setup = setups
    return model


def _add_communication_executor(tm) -> None:
    """``thunder.jit``'s set-up hook: the communication executor runs the collectives the forward records."""
    import thunder

    cd = thunder.compile_data(tm)
    if dist_ex not in cd.executors:
        cd.executors = (dist_ex, *cd.executors)
        cd.cache.clear()


@torch.no_grad()
def full_tensor(local: torch.Tensor, layout: TensorParallelLayout, group) -> torch.Tensor:
    """The full tensor from this rank's slice (all ranks of ``group`` must call it)."""
    slices = [torch.empty_like(local) for _ in range(layout.size)]
    dist.all_gather(slices, local.contiguous(), group=group)
    return layout.full(slices)
