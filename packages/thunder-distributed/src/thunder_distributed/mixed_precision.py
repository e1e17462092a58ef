"""Mixed precision for ``fsdp``: parameters gathered and used in a low precision, gradients reduced in a higher one.

``fsdp(model, mixed_precision=policy)`` takes PyTorch's ``torch.distributed.fsdp.MixedPrecisionPolicy``
(or any object with its four attributes) and follows FSDP2's meaning of it:

- the shards (what the optimizer updates) keep their dtype; each is cast to ``param_dtype`` before
  it is all-gathered, so the forward and backward compute with ``param_dtype`` parameters;
- each gradient is cast to ``reduce_dtype`` (default: the gradient's dtype, ``param_dtype``) before
  the reduce-scatter, and the reduced shard gradient back to the shard's dtype;
- ``cast_forward_inputs``: the floating-point tensors passed to the module are cast to
  ``param_dtype``; ``output_dtype``: the floating-point tensors it returns are cast to it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

__all__ = ["MixedPrecision", "install_cast_hooks"]


@dataclass(frozen=True)
class MixedPrecision:
    """The dtypes of a mixed precision policy (``None``: leave as is)."""

    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    cast_forward_inputs: bool = True

    @classmethod
    def from_policy(cls, policy: Any) -> MixedPrecision | None:
        """Reads a ``MixedPrecisionPolicy``-like object; ``None`` when it changes nothing."""
        if policy is None:
            return None
        fields = ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")
        if not all(hasattr(policy, f) for f in fields):
            raise TypeError(
                "thunder.distributed.fsdp: mixed_precision must be a torch.distributed.fsdp.MixedPrecisionPolicy "
                f"(param_dtype, reduce_dtype, output_dtype, cast_forward_inputs), got {type(policy).__name__}"
            )
        for f in fields[:3]:
            value = getattr(policy, f)
            if value is not None and not (isinstance(value, torch.dtype) and value.is_floating_point):
                raise TypeError(
                    f"thunder.distributed.fsdp: mixed_precision.{f} must be a floating dtype, got {value!r}"
                )
        made = cls(*(getattr(policy, f) for f in fields))
        return None if made.param_dtype is None and made.reduce_dtype is None and made.output_dtype is None else made

    def applied_to(self, layout, dtype: torch.dtype):
        """``layout`` (a ``ShardLayout``) with the gather and reduction dtypes of a parameter of ``dtype``."""
        param = self.param_dtype if self.param_dtype not in (None, dtype) else None
        reduce = self.reduce_dtype if self.reduce_dtype not in (None, param or dtype) else None
        return dataclasses.replace(layout, param_dtype=param, reduce_dtype=reduce)


def _cast_floating(tree, dtype: torch.dtype):
    def cast(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != dtype:
            return x.to(dtype)
        return x

    return pytree.tree_map(cast, tree)


def install_cast_hooks(module: torch.nn.Module, precision: MixedPrecision) -> list:
    """Forward hooks casting the module's floating-point inputs and outputs (traced by ``thunder.jit``)."""
    handles = []
    if precision.cast_forward_inputs and precision.param_dtype is not None:
        param_dtype = precision.param_dtype

        def cast_inputs(module, args, kwargs):
            return _cast_floating(args, param_dtype), _cast_floating(kwargs, param_dtype)

        handles.append(module.register_forward_pre_hook(cast_inputs, with_kwargs=True))
    if precision.output_dtype is not None:
        output_dtype = precision.output_dtype

        def cast_outputs(module, args, output):
            return _cast_floating(output, output_dtype)

        handles.append(module.register_forward_hook(cast_outputs))
    return handles
