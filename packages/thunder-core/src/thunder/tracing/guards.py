"""What a cache entry depends on besides its arguments, and the checks the prologue makes for it.

A trace specialises on every Python value the user's code read: module attributes of any type,
the module tree itself (submodules, parameter slots, hooks), and the globals and closure
variables of the functions it ran. The checks are cheap generated lines:

- module structure: a counter bumped by PyTorch's module/parameter/buffer registration hooks for
  modules thunder has traced, compared to its value when the entry was built, plus the identity of
  every submodule slot (catches ``del``) and the hook dictionaries;
- Python values: equality for plain data (numbers, strings, tuples and lists of them, dtypes,
  ``torch.Size``, config objects holding only plain data), identity for everything else;
- globals and closures: the names the code objects read from ``__globals__`` (functions they
  call in the user's modules included) and the cells of ``__closure__``.
"""

from __future__ import annotations

import dis
import functools
import linecache
import math
import types
import warnings
import weakref
from typing import Any

import torch

from thunder.tracing.dict_versions import dict_version_function

__all__ = [
    "structure_version",
    "track_module",
    "install_structure_hooks",
    "is_plain",
    "guard_value",
    "code_dependencies",
]

# bumped whenever a parameter, buffer or submodule of a traced module is registered or replaced
_structure_version = [0]
_tracked: weakref.WeakSet = weakref.WeakSet()
_hooks_installed = [False]


def _on_registration(module, name, value):
    # Dynamo inlines global module hooks into the graphs it captures (``self.layers[:n]`` builds a
    # ModuleList): reading ``_tracked`` there makes it guard on the set's size, which every
    # thunder.jit changes, so each call would recompile. A module built while Dynamo traces is
    # new, never tracked; Dynamo folds this test to a constant and guards on nothing.
    if torch.compiler.is_compiling():
        return
    if module in _tracked:
        _structure_version[0] += 1


def install_structure_hooks() -> None:
    """Installs PyTorch's global registration hooks that bump ``structure_version`` (idempotent).

    ``track_module`` installs them; a ``torch.compile`` backend installs them before Dynamo first
    traces, because Dynamo guards on how many global hooks there are (installing them later would
    make its first graphs recompile once).
    """
    if _hooks_installed[0]:
        return
    from torch.nn.modules import module as mm

    for register in (
        "register_module_module_registration_hook",
        "register_module_parameter_registration_hook",
        "register_module_buffer_registration_hook",
    ):
        fn = getattr(mm, register, None)
        if fn is not None:
            fn(_on_registration)
    _hooks_installed[0] = True


def track_module(module: torch.nn.Module) -> None:
    """Registrations on ``module`` from now on invalidate the cache entries that read it."""
    install_structure_hooks()
    _tracked.add(module)


def structure_version() -> list[int]:
    """The one-element list holding the module-structure counter (the prologue reads index 0)."""
    return _structure_version


_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout)


def is_plain(value, depth: int = 0) -> bool:
    """Data compared by value: scalars, dtypes, devices and (nested) tuples, lists, sets, dicts of them."""
    t = type(value)
    if t in _PLAIN_SCALARS or t is torch.Size:
        return True
    if depth > 4:
        return False
    if t in (tuple, list, set, frozenset):
        return len(value) <= 64 and all(is_plain(v, depth + 1) for v in value)
    if t is dict:
        return len(value) <= 64 and all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return False


def _plain_copy(value):
    t = type(value)
    if t in (list, set, dict):
        return t(value) if t is not dict else {k: _plain_copy(v) for k, v in value.items()}
    return value


def _has_negative_zero(value) -> bool:
    t = type(value)
    if t is float:
        return value == 0.0 and math.copysign(1.0, value) < 0
    if t in (tuple, list):
        return any(_has_negative_zero(v) for v in value)
    return False


def _is_config_object(value) -> bool:
    """An object holding only plain data in its ``__dict__`` (an HF config, a SimpleNamespace)."""
    if isinstance(value, (type, types.FunctionType, types.MethodType, types.ModuleType, torch.nn.Module)):
        return False
    d = getattr(value, "__dict__", None)
    if type(d) is not dict or len(d) > 512:
        return False
    return all(is_plain(v) or _is_nested_config(v) for v in d.values())


def _is_nested_config(value) -> bool:
    d = getattr(value, "__dict__", None)
    return (
        type(d) is dict
        and not isinstance(value, (type, types.FunctionType, types.ModuleType, torch.nn.Module))
        and all(is_plain(v) for v in d.values())
    )


def _config_snapshot(value) -> dict:
    return {k: (_plain_copy(v) if is_plain(v) else _config_snapshot(v)) for k, v in vars(value).items()}


def _config_equal(value, snapshot: dict) -> bool:
    d = getattr(value, "__dict__", None)
    if type(d) is not dict or d.keys() != snapshot.keys():
        return False
    for k, expected in snapshot.items():
        v = d[k]
        if type(expected) is dict and type(v) is not dict:
            if not _config_equal(v, expected):
                return False
        elif type(v) is not type(expected) or v != expected:
            return False
    return True


def _tagged_config_keys(value) -> list[str] | None:
    """The keys of a config object's ``__dict__`` that hold dicts, when the version tags of that ``__dict__`` and of
    those dicts see every change of the data compared (each other value, and each value in those dicts, is
    immutable): then equal tags mean an equal config. None otherwise (a list, or a dict in a dict), or where this
    Python has no usable tags."""
    if dict_version_function() is None:
        return None
    keys = []
    for k, v in vars(value).items():
        if type(v) is dict:
            if not all(_identity_suffices(x) and _identity_suffices(y) for x, y in v.items()):
                return None
            keys.append(k)
        elif not _identity_suffices(v) or _is_config_object(v):
            return None
    return keys


def _config_tags_condition(pb, obj: str, snap: str, keys: list[str]) -> str:
    """The prologue's condition that config ``obj`` differs from ``snap``: false at once while the tags of its
    ``__dict__`` and of the dicts under ``keys`` equal those read at the last comparison that found it equal
    (``_recheck_config``)."""
    tags = pb.constant([None] * (1 + len(keys)), "_config_tags")
    pb.trace.constants["_dict_version"] = dict_version_function()
    pb.trace.constants["_recheck_config"] = _recheck_config
    moved = [f"_dict_version({obj}.__dict__) != {tags}[0]"]
    moved += [f"_dict_version({obj}.__dict__[{k!r}]) != {tags}[{i + 1}]" for i, k in enumerate(keys)]
    return f"(({' or '.join(moved)}) and not _recheck_config({obj}, {snap}, {tuple(keys)!r}, {tags}))"


def _recheck_config(obj, snapshot: dict, keys: tuple, tags: list) -> bool:
    """Whether config ``obj`` equals ``snapshot``; if so, ``tags`` keeps the version tags read before comparing
    (of its ``__dict__`` and of the dicts under ``keys``: a later change moves one of them)."""
    dict_version = dict_version_function()
    d = obj.__dict__
    versions = [dict_version(d)]
    for k in keys:
        v = d.get(k)
        if type(v) is not dict:
            return d == snapshot  # (then it differs from the snapshot, whose value there is a dict)
        versions.append(dict_version(v))
    if d != snapshot:
        return False
    tags[:] = versions
    return True


def guard_value(
    pb, expr: str, value: Any, what: str | None = None, *, read_from: tuple[dict, str] | None = None
) -> None:
    """Emits a check that ``expr`` still evaluates to what ``value`` was when tracing.

    Plain data is compared by type and value (``-0.0`` apart from ``0.0``), a config object by
    identity and by the plain data it holds, anything else (functions, classes, modules, tensors
    baked in as constants) by identity.

    ``read_from``: the dict and key ``expr`` reads (a module's ``__dict__`` and an attribute name, a function's
    globals and a name). Where finding the same object there proves the check passes (immutable data, identity
    checks), the check runs only when the object changed (``PrologueBuilder.dict_read``).
    """
    if read_from is not None and (_identity_suffices(value) or id(value) in pb.__dict__.get("_configs_checked", ())):
        with pb.dict_read(*read_from, value):
            _guard_value(pb, expr, value, what)
    else:
        _guard_value(pb, expr, value, what)


def _identity_suffices(value, depth: int = 0) -> bool:
    """Whether ``guard_value``'s check of ``value`` passes for ``value`` itself, whatever happened to it since:
    immutable data, or an object checked by identity (not a container or config object compared by content)."""
    t = type(value)
    if t in _PLAIN_SCALARS or t is torch.Size:  # (all immutable)
        return True
    if t in (tuple, frozenset):
        return depth < 4 and all(_identity_suffices(v, depth + 1) and is_plain(v) for v in value)
    return not is_plain(value) and not _is_config_object(value)


def _guard_value(pb, expr: str, value: Any, what: str | None) -> None:
    t = type(value)
    if value is None or t is bool:
        pb.fail_if(f"{expr} is not {value!r}", what)
    elif t in (int, float, complex, str):
        pb.check_value(expr, value, what)
    elif isinstance(value, torch.dtype) or isinstance(value, torch.layout):
        pb.fail_if(f"{expr} is not {pb.constant(value, '_obj')}", what)
    elif is_plain(value):
        const = pb.constant(_plain_copy(value), "_value")
        cond = f"type({expr}) is not {pb.constant(t, '_type')} or {expr} != {const}"
        if _has_negative_zero(value):
            pb.trace.constants["_repr"] = repr
            cond += f" or _repr({expr}) != {repr(value)!r}"
        pb.fail_if(cond, what)
    elif id(value) in pb.__dict__.get("_configs_checked", ()):
        # the same config held by many modules (HF layers): its data is checked once
        pb.fail_if(f"{expr} is not {pb.constant(value, '_obj')}", what)
    elif _is_config_object(value):
        obj = pb.constant(value, "_obj")
        pb.__dict__.setdefault("_configs_checked", set()).add(id(value))
        snapshot = _config_snapshot(value)
        snap = pb.constant(snapshot, "_config")
        tagged = _tagged_config_keys(value)
        if tagged is not None:
            # plain data that only a change of its dicts can change: compared only when a dict's tag moved
            pb.fail_if(f"{expr} is not {obj} or {_config_tags_condition(pb, obj, snap, tagged)}", what)
        elif all(type(v) is not dict or type(getattr(value, k)) is dict for k, v in snapshot.items()):
            # only plain data: one dict comparison (C speed)
            pb.fail_if(f"{expr} is not {obj} or {obj}.__dict__ != {snap}", what)
        else:
            pb.trace.constants["_config_equal"] = _config_equal
            pb.fail_if(f"{expr} is not {obj} or not _config_equal({obj}, {snap})", what)
    else:
        pb.fail_if(f"{expr} is not {pb.constant(value, '_obj')}", what)


_SKIP_PREFIXES = ("torch", "thunder", "builtins", "typing", "functools", "math", "collections", "abc")


def _own_code(fn) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module.split(".")[0] not in _SKIP_PREFIXES


def _code_objects(code: types.CodeType, acc: list) -> None:
    acc.append(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_objects(c, acc)


_MISSING = object()


def code_dependencies(functions, trace_only: list | None = None, visited: list | None = None):
    """The globals ``(namespace, name, value)`` and closure cells ``(cell, name, value)`` the
    functions read, following the user's own functions they call through globals.

    The Python functions followed are appended to ``visited`` (see ``function_state``).

    Python modules (``torch``, ``F``) are not guarded: their attributes are looked up at call time.
    Calls that only run while tracing (``print``, the ``random`` module) are appended to
    ``trace_only`` as ``(what, filename, line)``.
    """
    globals_read: dict[tuple[int, str], tuple[dict, str, Any]] = {}
    cells: dict[int, tuple[Any, str, Any]] = {}
    seen: set[int] = set()
    todo = [f for f in functions if f is not None]
    while todo:
        fn = todo.pop()
        fn = getattr(fn, "__func__", fn)
        if not isinstance(fn, types.FunctionType) or id(fn) in seen:
            continue
        seen.add(id(fn))
        if visited is not None:
            visited.append(fn)
        g = fn.__globals__
        codes: list = []
        _code_objects(fn.__code__, codes)
        if trace_only is not None and not _is_library_code(fn.__code__):
            for code in codes:
                trace_only.extend(_trace_only_calls(code, g))
        for code in codes:
            for name in code.co_names:
                value = g.get(name, _MISSING)
                if value is _MISSING or isinstance(value, types.ModuleType):
                    continue
                key = (id(g), name)
                if key not in globals_read:
                    globals_read[key] = (g, name, value)
                    if isinstance(value, types.FunctionType) and _own_code(value):
                        todo.append(value)
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    value = cell.cell_contents
                except ValueError:  # an empty cell (a variable assigned later)
                    continue
                if isinstance(value, types.ModuleType) or name == "__class__":
                    continue
                cells[id(cell)] = (cell, name, value)
                if isinstance(value, types.FunctionType) and _own_code(value):
                    todo.append(value)
    return list(globals_read.values()), list(cells.values())


def function_state(functions) -> list[tuple[Any, str, Any]]:
    """``(function, attribute, value)`` for the state of the functions that their code can read.

    Their ``__defaults__`` and ``__kwdefaults__`` (when set), and each attribute of a function's
    ``__dict__`` whose name some of the functions' code reads as an attribute (``fn.flag``): the
    program specialises on them as on globals.
    """
    names: set[str] = set()
    for fn in functions:
        codes: list = []
        _code_objects(fn.__code__, codes)
        for code in codes:
            names.update(code.co_names)
    out = []
    for fn in functions:
        if fn.__defaults__ is not None:
            out.append((fn, "__defaults__", fn.__defaults__))
        if fn.__kwdefaults__ is not None:
            out.append((fn, "__kwdefaults__", fn.__kwdefaults__))
        d = fn.__dict__
        if d:
            for name in names.intersection(d):
                out.append((fn, name, d[name]))
    return out


_TRACE_ONLY_MODULES = ("random", "numpy.random")


def _is_library_code(code: types.CodeType) -> bool:
    """Installed packages' code (a print in a library's debugging branch is not the user's)."""
    filename = code.co_filename
    return "site-packages" in filename or "dist-packages" in filename


@functools.lru_cache(maxsize=1024)
def _global_loads(code: types.CodeType) -> tuple[tuple[str, str, int], ...]:
    """``(kind, name, line)`` of the global loads in ``code``, and of locals bound by ``import random``."""
    out = []
    line = code.co_firstlineno
    imported: dict[str, str] = {}  # local name -> module imported into it
    pending = None
    for ins in dis.get_instructions(code):
        pos = getattr(ins, "positions", None)  # Python 3.11+
        if pos is not None and pos.lineno is not None:
            line = pos.lineno
        elif type(ins.starts_line) is int:  # Python 3.10
            line = ins.starts_line
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            out.append(("global", ins.argval, line))
        elif ins.opname == "IMPORT_NAME" and ins.argval in _TRACE_ONLY_MODULES:
            pending = ins.argval
        elif ins.opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF") and pending is not None:
            imported[ins.argval] = pending
            pending = None
        elif ins.opname in ("LOAD_FAST", "LOAD_DEREF") and ins.argval in imported:
            out.append(("import", imported[ins.argval], line))
    return tuple(out)


def _trace_only_calls(code: types.CodeType, g: dict) -> list[tuple[str, str, int]]:
    """``print(...)`` and the ``random`` module in ``code``: Python that runs once, while thunder traces."""
    found = []
    for kind, name, line in _global_loads(code):
        if kind == "import":
            found.append((f"the {name} module", code.co_filename, line))
            continue
        value = g.get(name, _MISSING)
        if value is _MISSING and name == "print":
            found.append(("print(...)", code.co_filename, line))
        elif isinstance(value, types.ModuleType) and value.__name__ in _TRACE_ONLY_MODULES:
            found.append((f"{name} (the {value.__name__} module)", code.co_filename, line))
        elif callable(value) and getattr(value, "__module__", None) in _TRACE_ONLY_MODULES:
            found.append((f"{name}(...) from {value.__module__}", code.co_filename, line))
    return found


_warned_trace_only: set = set()


def warn_trace_only(calls) -> None:
    """Warns once per source line about Python calls whose effect is fixed when the function is traced."""
    for what, filename, line in calls:
        key = (filename, line)
        if key in _warned_trace_only:
            continue
        _warned_trace_only.add(key)
        text = linecache.getline(filename, line).strip()
        warnings.warn(
            f'{what} at File "{filename}", line {line}{": " + text if text else ""} runs only while thunder.jit '
            "traces the function, not on later calls: a printed value appears once, and a random number is drawn "
            "once and then fixed in the compiled program. Use torch's random functions (torch.rand) for values "
            "drawn on every call, and print outside the jitted function.",
            stacklevel=2,
        )
