"""``type(x)`` of a stand-in tensor answers the class of the tensor it stands for, while tracing.

The stand-in user code sees is a ``torch.Tensor`` subclass (``TracingTensor``), and ``type(x)`` is
answered by the interpreter from the object itself, so ``type(x) is torch.Tensor`` would be False
inside the traced code. Python looks a global name up in the module's globals before the builtins,
so while a function is traced the globals of the user's code that runs (the function, the modules'
``forward`` methods, hooks, and the functions they call through globals or closures: what
``guards.code_dependencies`` follows) get a ``type`` that answers ``x.__class__`` (the real tensor's
class: ``torch.Tensor``, ``nn.Parameter``, the input's own subclass) for a stand-in and behaves as
the builtin ``type`` for everything else. It is removed when tracing ends, also on an error.

Tracing runs one program at a time (``thunder.compiler``'s compile lock). Another thread running
code of those modules meanwhile gets the same answers as from the builtin, except where it compares
an object with ``builtins.type`` itself by identity (``type(C) is builtins.type``).
"""

from __future__ import annotations

import builtins
import contextlib
import types
from collections.abc import Iterable, Iterator

__all__ = ["TracingAwareType", "shadowed_type", "namespaces_of"]

_builtin_type = builtins.type
_LIBRARIES = ("torch", "thunder")  # their own uses of type() see the stand-in as it is


class _TracingAwareTypeMeta(_builtin_type):
    """The metaclass of ``TracingAwareType``: its calls, ``isinstance`` and ``issubclass`` act as ``type``'s."""

    def __call__(cls, *args, **kwargs):
        if cls is not TracingAwareType:  # a metaclass the traced code derived from ``type``
            return super().__call__(*args, **kwargs)
        if len(args) != 1 or kwargs:
            return _builtin_type(*args, **kwargs)  # type(name, bases, namespace, **kwds)
        obj = args[0]
        real = _builtin_type(obj)
        if real is _TracingTensor:
            return obj._tt_class
        if real is _builtin_type or real is _TracingAwareTypeMeta:
            return TracingAwareType  # type(C) is type (and type(type) is type), as with the builtin
        return real

    def __instancecheck__(cls, obj) -> bool:
        if cls is TracingAwareType:
            return isinstance(obj, _builtin_type)
        return super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub) -> bool:
        if cls is TracingAwareType:
            return issubclass(sub, _builtin_type)
        return super().__subclasscheck__(sub)

    def __eq__(cls, other) -> bool:
        if cls is TracingAwareType and other is _builtin_type:
            return True
        return cls is other

    def __hash__(cls) -> int:
        return hash(_builtin_type) if cls is TracingAwareType else super().__hash__()


class TracingAwareType(_builtin_type, metaclass=_TracingAwareTypeMeta):
    """``type`` for the traced code: ``TracingAwareType(x)`` is ``x.__class__`` for a stand-in tensor and
    ``type(x)`` otherwise; it equals (and hashes as) the builtin ``type``."""


TracingAwareType.__name__ = TracingAwareType.__qualname__ = "type"
TracingAwareType.__module__ = "builtins"


def namespaces_of(functions: Iterable) -> list[dict]:
    """The globals of ``functions`` (Python functions) that are the user's: not torch's or thunder's, and not
    defining a global named ``type`` of their own."""
    out: dict[int, dict] = {}
    for fn in functions:
        fn = getattr(fn, "__func__", fn)
        if not isinstance(fn, types.FunctionType):
            continue
        g = fn.__globals__
        if id(g) in out or "type" in g:
            continue
        module = g.get("__name__") or ""
        if module.split(".")[0] in _LIBRARIES:
            continue
        out[id(g)] = g
    return list(out.values())


@contextlib.contextmanager
def shadowed_type(namespaces: Iterable[dict]) -> Iterator[None]:
    """Binds ``type`` to ``TracingAwareType`` in each of ``namespaces`` (module globals) for the duration."""
    installed = []
    try:
        for g in namespaces:
            if "type" not in g:
                g["type"] = TracingAwareType
                installed.append(g)
        yield
    finally:
        for g in installed:
            if g.get("type") is TracingAwareType:
                del g["type"]


from thunder.tracing.tracing_tensor import TracingTensor as _TracingTensor  # noqa: E402
