"""``ThunderModule``: what ``thunder.jit(module)`` returns. It shares the original module's state."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["ThunderModule", "check_jittable_module"]


def check_jittable_module(module: torch.nn.Module) -> None:
    """Refuses, with a clear error, modules whose data parallelism PyTorch runs outside the module's code.

    ``thunder.jit`` traces ``module.forward``; PyTorch's ``DistributedDataParallel``/``DataParallel``
    and FSDP wrappers communicate from hooks and tensor subclasses that tracing does not see, and
    parameters that are ``DTensor``\\ s (FSDP2's ``fully_shard``, ``parallelize_module``) are tensor
    subclasses thunder does not trace. ``thunder.distributed.ddp``/``fsdp`` do the same jobs as trace
    transforms.

    Raises:
        TypeError: naming the wrapper or the first ``DTensor`` parameter or buffer.
    """
    wrappers = {
        "DistributedDataParallel": "thunder.jit(thunder.distributed.ddp(model))",
        "DataParallel": "thunder.jit(thunder.distributed.ddp(model)) under torchrun",
        "FullyShardedDataParallel": "thunder.jit(thunder.distributed.fsdp(model))",
    }
    for cls in type(module).__mro__:
        if cls.__module__.startswith("torch.") and cls.__name__ in wrappers:
            raise TypeError(
                f"thunder.jit: a module wrapped in torch's {cls.__name__} is not supported (its communication runs "
                f"in hooks that tracing does not see); jit the plain module and let thunder do the data "
                f"parallelism: {wrappers[cls.__name__]}"
            )
    dtensor_module = sys.modules.get("torch.distributed.tensor")
    if dtensor_module is None:  # nothing imported DTensor, so no parameter is one
        return
    dtensor = dtensor_module.DTensor
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, t in named:
            if isinstance(t, dtensor):
                raise TypeError(
                    f"thunder.jit: {kind} {name!r} is a DTensor (placements {tuple(t.placements)}, as made by "
                    "torch's fully_shard or parallelize_module); thunder does not trace DTensor parameters. "
                    "Jit the plain module and shard it with thunder: "
                    "thunder.jit(thunder.distributed.fsdp(model))"
                )


class ThunderModule(torch.nn.Module):
    """A wrapper ``nn.Module`` subclass.

    This wrapper is returned by ``thunder.jit``; you would typically not instantiate it manually.
    Parameters, buffers and submodules are the original module's (the same tensor objects), under
    their original names.
    """

    def __init__(self, model: torch.nn.Module, compiled_model_call: Callable):
        super().__init__()
        self._model = model
        self._forward_fn = compiled_model_call
        self._no_sync = False

    def forward(self, *args, **kwargs):
        return self._forward_fn(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        if self._forward_hooks or self._forward_pre_hooks or self._backward_hooks:
            return super().__call__(*args, **kwargs)
        return self._forward_fn(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self._modules.get("_model")
            if model is None:
                raise
            value = getattr(model, name)
            if inspect.ismethod(value) and value.__self__ is model:
                # model.generate(...) and other methods calling the model run its jitted forward
                return _with_jitted_forward(self, value)
            return value

    def get_parameter(self, target: str) -> torch.nn.Parameter:
        """Return the parameter given by ``target`` (the original module's name for it)."""
        return self._model.get_parameter(target)

    def get_buffer(self, target: str) -> torch.Tensor:
        """Return the buffer given by ``target`` (the original module's name for it)."""
        return self._model.get_buffer(target)

    def get_submodule(self, target: str) -> torch.nn.Module:
        """Return the submodule given by ``target``; ``""`` is the original module."""
        return self._model.get_submodule(target)

    def named_parameters(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Iterator:
        """Yield ``(name, parameter)`` pairs of the original module."""
        yield from self._model.named_parameters(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True) -> Iterator:
        """Yield ``(name, buffer)`` pairs of the original module."""
        yield from self._model.named_buffers(prefix=prefix, recurse=recurse, remove_duplicate=remove_duplicate)

    def state_dict(self, *args, **kwargs):
        """The original module's ``state_dict`` (same keys as without thunder)."""
        return self._model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Loads into the original module; with ``assign=True`` the next call re-reads the new tensors."""
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    def _fqn_modifiers(self) -> dict[str, str]:
        """The protocol of ``torch.distributed.checkpoint.state_dict`` for wrapper modules: the
        ``_model`` level is not part of the state dict's keys (so ``get/set_model_state_dict`` and
        ``get/set_optimizer_state_dict`` use the same names as ``state_dict``)."""
        return {"_model": "_model"}

    @contextmanager
    def no_sync(self):
        """Context manager to disable gradient synchronization in data parallel mode.

        Without a data-parallel transform it has no effect.
        """
        previous = self._no_sync
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = previous


def _with_jitted_forward(tm: ThunderModule, method: Callable) -> Callable:
    """``method`` of the original module, run with ``tm``'s compiled program as the module's forward.

    ``jm.generate(...)`` calls Hugging Face's ``generate`` on the original model, which calls
    ``self(...)``: ``nn.Module.__call__`` runs the model's hooks as usual and then its ``forward``,
    which for the duration of the call is the jitted one. While thunder traces (a cache miss), the
    model's own forward runs, so the traced program is the model's.
    """

    @functools.wraps(method)
    def run_with_jitted_forward(*args, **kwargs):
        with _jitted_forward(tm):
            return method(*args, **kwargs)

    return run_with_jitted_forward


def _jitted_forward_class(tm: ThunderModule) -> type:
    """A subclass of the model's class whose ``forward`` runs ``tm``'s program (made once per ``tm``)."""
    model = tm._model
    cls = type(model)
    cached = tm.__dict__.get("_jitted_forward_class")
    if cached is not None and cached.__bases__[0] is cls:
        return cached
    from thunder.tracing.tracer import _current_tracer

    original_forward = cls.forward

    @functools.wraps(original_forward)
    def forward(self, *args, **kwargs):
        if _current_tracer[-1] is not None:  # thunder is tracing the model: its own forward
            return original_forward(self, *args, **kwargs)
        return tm._forward_fn(*args, **kwargs)

    jitted = type(
        cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__, "__qualname__": cls.__qualname__}
    )
    tm.__dict__["_jitted_forward_class"] = jitted
    return jitted


@contextmanager
def _jitted_forward(tm: ThunderModule):
    """While active, calling the original model (``model(...)``) runs ``tm``'s compiled program."""
    model = tm._model
    depth = tm.__dict__.get("_jitted_forward_depth", 0)
    if depth or "forward" in model.__dict__:
        # nested, or the model's forward is an instance attribute (then it is called as it is)
        tm.__dict__["_jitted_forward_depth"] = depth + 1
        try:
            yield
        finally:
            tm.__dict__["_jitted_forward_depth"] = depth
        return
    cls = type(model)
    model.__class__ = _jitted_forward_class(tm)
    tm.__dict__["_jitted_forward_depth"] = 1
    try:
        yield
    finally:
        tm.__dict__["_jitted_forward_depth"] = 0
        model.__class__ = cls
