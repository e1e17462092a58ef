"""``TraceCtx``: a trace, i.e. a straight-line program of bound symbols over proxies.

A trace prints as Python source (see :mod:`thunder.core.codegen`) and compiles to a callable.
The *current* trace is the one symbols record into; :func:`tracectx` sets it for a block.
"""

from __future__ import annotations

import builtins
import time
from contextlib import contextmanager
from typing import Any

__all__ = ["TraceCtx", "get_tracectx", "set_tracectx", "tracectx", "from_trace", "TraceProvenance"]


class TraceProvenance:
    """Which pass made a trace and how long it took; printed as the trace's header comment."""

    __slots__ = ("pss", "ms")

    def __init__(self, pss: str, ms: float | None = None):
        self.pss = pss
        self.ms = ms

    def __repr__(self) -> str:
        took = "" if self.ms is None else f" (took {int(self.ms)} milliseconds)"
        return f"# Constructed by {self.pss}{took}"


class TraceCtx:
    """A trace of bound symbols.

    ``args``/``kwargs`` are the signature's parameters (proxies, or names for collections);
    ``bound_symbols`` the program, ending with a return symbol.
    """

    def __init__(self, fn_name: str = "computation"):
        self.fn_name = fn_name
        self.args: list = []
        self.kwargs: dict = {}
        self.bound_symbols: list = []
        self.names: set[str] = set()
        self._counters: dict[str, int] = {}
        self.provenance: TraceProvenance | None = None
        # scopes[-1] is where the next bound symbol is recorded; a composite symbol pushes one
        self.scopes: list[list] = [self.bound_symbols]
        # set by the tracing front end: called for symbols invoked directly by user code
        self.user_call_hook = None
        self.constants: dict[str, Any] = {}
        self.decorators: list[str] = []
        self.extra_imports: list[str] = []
        self.tags: dict[str, Any] = {}
        self._python_cache: str | None = None

    # --- names ---
    def make_name(self, prefix: str = "t") -> str:
        n = self._counters.get(prefix, 0)
        names = self.names
        while True:
            name = f"{prefix}{n}"
            n += 1
            if name not in names:
                break
        self._counters[prefix] = n
        names.add(name)
        return name

    def add_name(self, name: str) -> str:
        """Reserves ``name``; if taken (or not an identifier) returns a fresh variant of it."""
        if not name.isidentifier() or _is_keyword(name):
            name = "t_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        elif name in _GLOBAL_NAMES or name.startswith("_"):  # (a variable so named would shadow a global)
            name = "t" + name if name.startswith("_") else "t_" + name
        if name in self.names:
            return self.make_name(name + "_")
        self.names.add(name)
        return name

    def add_constant(self, value: Any, prefix: str = "_obj") -> str:
        """The name of ``value`` among the trace's constants (one name per object), added if new."""
        index = self.__dict__.get("_constant_names")
        if index is None or index[0] is not self.constants:  # (built on first use; rebuilt if replaced)
            index = self._constant_names = (self.constants, {id(v): k for k, v in self.constants.items()})
        name = index[1].get(id(value))
        if name is not None and self.constants.get(name) is value:
            return name
        name = self.make_name(prefix)
        self.constants[name] = value
        index[1][id(value)] = name
        return name

    def set_provenance(self, provenance: TraceProvenance | str) -> None:
        self.provenance = provenance if isinstance(provenance, TraceProvenance) else TraceProvenance(provenance)

    # --- printing / compiling ---
    def python(self, *, include_decomposition: bool = True) -> str:
        from thunder.core.codegen import trace_to_python

        if include_decomposition and self._python_cache is not None:
            return self._python_cache
        src = trace_to_python(self, include_decomposition=include_decomposition)
        if include_decomposition:
            self._python_cache = src
        return src

    def python_callable(self):
        from thunder.core.codegen import compile_trace

        return compile_trace(self)

    def __repr__(self) -> str:
        return self.python()

    __str__ = __repr__


_current: list[TraceCtx | None] = [None]


def get_tracectx() -> TraceCtx | None:
    return _current[-1]


def set_tracectx(trace: TraceCtx | None):
    _current.append(trace)
    return len(_current) - 1


def reset_tracectx(token: int) -> None:
    del _current[token:]


@contextmanager
def tracectx(trace: TraceCtx | None):
    token = set_tracectx(trace)
    try:
        yield trace
    finally:
        reset_tracectx(token)


def from_trace(trace: TraceCtx) -> TraceCtx:
    """A new, empty trace with the same signature and names as ``trace``."""
    t = TraceCtx(trace.fn_name)
    t.args = trace.args
    t.kwargs = trace.kwargs
    t.names = set(trace.names)
    t._counters = dict(trace._counters)
    t.constants = dict(trace.constants)
    t.decorators = list(trace.decorators)
    t.tags = dict(trace.tags)
    return t


class timed_pass:
    """Times a pass and stamps its provenance on the trace it returns."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self):
        self.start = time.perf_counter_ns()
        return self

    def stamp(self, trace: TraceCtx) -> TraceCtx:
        trace.set_provenance(TraceProvenance(self.name, (time.perf_counter_ns() - self.start) / 1e6))
        return trace

    def __exit__(self, *exc):
        return False


_keywords = None


# names a generated program may read as globals (the modules and classes its code refers to, the builtins its
# printers write, the backward's arguments): a variable named after a user's parameter must not take them
_GLOBAL_NAMES = frozenset(
    ("torch", "Tensor", "math", "dtypes", "devices", "thunder", "ltorch", "prims", "saved_for_backward", "cotangents")
    + tuple(n for n in dir(builtins) if not n.startswith("_"))
) - frozenset(("input", "id", "format", "filter", "hash", "help", "vars", "dir", "open", "iter", "license"))


def _is_keyword(name: str) -> bool:
    global _keywords
    if _keywords is None:
        import keyword

        _keywords = set(keyword.kwlist) | set(keyword.softkwlist)
    return name in _keywords
