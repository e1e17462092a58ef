"""The executor registry: every registered executor, the default list and the always-present ones."""

from __future__ import annotations

from collections.abc import Sequence

from thunder.executors.base import Executor

__all__ = [
    "register_executor",
    "deregister_executor",
    "get_all_executors",
    "get_default_executors",
    "get_always_executors",
    "add_default_executor",
    "remove_default_executor",
    "get_executor",
    "resolve_executors",
]


class _Registry:
    def __init__(self):
        self.all: dict[str, Executor] = {}
        self.default: list[Executor] = []
        self.always: list[Executor] = []


_registry = _Registry()


def register_executor(ex: Executor) -> Executor:
    """Makes ``ex`` known by name (so ``jit(executors=["name"])`` and ``get_executor`` find it)."""
    _registry.all[ex.name] = ex
    return ex


def deregister_executor(ex: Executor | str) -> None:
    name = ex if isinstance(ex, str) else ex.name
    ex = _registry.all.pop(name, None)
    _registry.default = [e for e in _registry.default if e.name != name]


def get_all_executors() -> tuple[Executor, ...]:
    """Every registered executor: the built-in ones, those registered by hand and those ``thunder.discover()`` found."""
    return tuple(_registry.all.values())


def get_default_executors() -> tuple[Executor, ...]:
    """The executors ``thunder.jit`` uses when none are given, in priority order."""
    return tuple(_registry.default)


def get_always_executors() -> tuple[Executor, ...]:
    """Executors appended to every executor list (torch and python), so every program can run."""
    return tuple(_registry.always)


def add_default_executor(ex: Executor, *, position: int = 0) -> None:
    register_executor(ex)
    _registry.default = [e for e in _registry.default if e.name != ex.name]
    _registry.default.insert(position, ex)


def remove_default_executor(ex: Executor | str) -> None:
    name = ex if isinstance(ex, str) else ex.name
    _registry.default = [e for e in _registry.default if e.name != name]


def add_always_executor(ex: Executor) -> None:
    register_executor(ex)
    _registry.always.append(ex)


def get_executor(name: str) -> Executor | None:
    return _registry.all.get(name)


def resolve_executors(executors: Sequence[Executor | str] | None) -> tuple[Executor, ...]:
    """The effective executor list: the given ones (names resolved) or the defaults, then the always ones."""
    if executors is None:
        executors = get_default_executors()
    if isinstance(executors, (Executor, str)):
        executors = (executors,)
    out: list[Executor] = []
    for ex in executors:
        if isinstance(ex, str):
            found = get_executor(ex)
            if found is None:
                known = ", ".join(sorted(_registry.all)) or "none"
                raise ValueError(f"unknown executor {ex!r} in executors=; registered executors: {known}")
            ex = found
        if not isinstance(ex, Executor):
            raise TypeError(f"executors= must contain Executor objects or their names, got {type(ex).__name__}")
        if ex not in out:
            out.append(ex)
    for ex in get_always_executors():
        if ex not in out:
            out.append(ex)
    return tuple(out)
