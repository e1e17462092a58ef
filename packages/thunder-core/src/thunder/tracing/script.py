"""TorchScript functions called by traced code run as the Python functions they were compiled from.

A ``torch.jit.script`` function runs in TorchScript's interpreter, below ``__torch_function__``,
where a thunder stand-in tensor cannot go (Hugging Face's DeBERTa builds its relative positions
with scripted helpers). While thunder traces, the module globals of the traced function and of
every submodule's class that hold a scripted function are pointed at its original Python function
(which PyTorch keeps as ``_torchdynamo_inline``), so the tracer records the torch calls it makes.
The globals are restored when tracing ends; the Python function computes what the scripted one does.
"""

from __future__ import annotations

import sys

import torch

__all__ = ["inline_script_functions"]


def _namespaces(module: torch.nn.Module | None, fn) -> list[dict]:
    names = set()
    if module is not None:
        names.update(type(m).__module__ for m in module.modules())
    out = [sys.modules[n].__dict__ for n in names if n in sys.modules]
    fn_globals = getattr(fn, "__globals__", None)
    if isinstance(fn_globals, dict) and all(fn_globals is not d for d in out):
        out.append(fn_globals)
    return out


class inline_script_functions:
    """Context manager: scripted functions in the traced code's globals are their Python originals."""

    def __init__(self, module: torch.nn.Module | None, fn):
        self.module = module
        self.fn = fn
        self.patches: list[tuple[dict, str, object]] = []

    def __enter__(self):
        script_function = torch.jit.ScriptFunction
        for namespace in _namespaces(self.module, self.fn):
            for name, value in list(namespace.items()):
                if type(value) is script_function:
                    original = getattr(value, "_torchdynamo_inline", None)
                    if callable(original):
                        self.patches.append((namespace, name, value))
                        namespace[name] = original
        return self

    def __exit__(self, *exc):
        for namespace, name, value in reversed(self.patches):
            namespace[name] = value
        self.patches.clear()
        return False
