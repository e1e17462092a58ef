"""``ThunderModule``: what ``thunder.jit(module)`` returns. It shares the original module's state."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["ThunderModule"]


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
