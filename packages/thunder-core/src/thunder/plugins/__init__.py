"""Plugin discovery: executors (and transforms) that separately installed packages provide.

Plugins are modules named by entry points in the ``thunder`` group (see
:mod:`thunder.plugins.hookspecs` for the hooks and the rules plugins follow). Nothing is loaded
when Thunder is imported: the first call of :func:`discover`, :func:`plugin_infos`,
:func:`discover_transforms` or :func:`report` loads the plugins (through pluggy's
``load_setuptools_entrypoints``), calls their hooks once each and remembers the result.

``thunder.discover()`` returns the executors the plugins provide that can run here, highest
``priority`` first, followed by the default executors, so that
``thunder.jit(fn, executors=thunder.discover())`` uses everything installed.
``python -m thunder.plugins`` prints the report.
"""

from __future__ import annotations

import importlib.metadata
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import pluggy

from thunder.executors.base import Executor
from thunder.executors.registry import get_default_executors, register_executor
from thunder.plugins import hookspecs
from thunder.plugins.hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME, hookimpl, hookspec

__all__ = [
    "hookspec",
    "hookimpl",
    "ThunderPluginWarning",
    "PluginInfo",
    "get_plugin_manager",
    "plugin_infos",
    "discover",
    "discover_transforms",
    "report",
]


class ThunderPluginWarning(UserWarning):
    """A plugin failed to import, or one of its hooks raised or returned something invalid."""


@dataclass
class PluginInfo:
    """What one plugin is and what it contributed.

    Attributes:
        name: the plugin's name (its entry-point name).
        module: what the entry point names (``"my_package.plugin"``).
        distribution: the installed distribution that declares it (``None`` if registered by hand).
        version: that distribution's version.
        executors: the executors it provides that can run here.
        skipped: ``(executor name, reason)`` for each executor it provides that cannot run here.
        transforms: the transforms it provides, by name.
        provides: APIs it provides through other hooks (e.g. ``"thunder.distributed"``).
        unavailable_reason: why the plugin contributes nothing here, as the plugin reports it.
        error: the error that stopped it (import or hook), if any.
    """

    name: str
    module: str = ""
    distribution: str | None = None
    version: str | None = None
    executors: list[Executor] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    transforms: dict[str, Callable] = field(default_factory=dict)
    unavailable_reason: str | None = None
    error: str | None = None
    provides: list[str] = field(default_factory=list)


_plugin_manager: pluggy.PluginManager | None = None
_infos: list[PluginInfo] | None = None


def get_plugin_manager() -> pluggy.PluginManager:
    """Thunder's pluggy ``PluginManager`` (project ``"thunder"``), with the hook specs added.

    Plugins are loaded into it by the first :func:`discover` (or :func:`plugin_infos`); a plugin
    object registered with ``get_plugin_manager().register(obj, name=...)`` before that is
    discovered too (call ``discover(reload=True)`` after registering later).
    """
    global _plugin_manager
    if _plugin_manager is None:
        pm = pluggy.PluginManager(PROJECT_NAME)
        pm.add_hookspecs(hookspecs)
        _plugin_manager = pm
    return _plugin_manager


def _warn(info: PluginInfo, what: str, e: BaseException) -> None:
    info.error = f"{what}: {type(e).__name__}: {e}"
    where = f" ({info.module})" if info.module else ""
    warnings.warn(
        f"thunder plugin {info.name!r}{where} is skipped: {info.error}",
        ThunderPluginWarning,
        stacklevel=4,
    )


def _entry_points() -> list[tuple[importlib.metadata.EntryPoint, importlib.metadata.Distribution]]:
    found = []
    seen: set[str] = set()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group == ENTRY_POINT_GROUP and ep.name not in seen:
                seen.add(ep.name)
                found.append((ep, dist))
    return found


def _load_plugins(pm: pluggy.PluginManager) -> dict[str, PluginInfo]:
    """Loads each entry point on its own, so that one broken plugin does not stop the others."""
    infos: dict[str, PluginInfo] = {}
    for ep, dist in _entry_points():
        info = PluginInfo(ep.name, ep.value, dist.metadata["Name"], dist.version)
        infos[ep.name] = info
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        try:
            pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=ep.name)
        except Exception as e:
            pm.set_blocked(ep.name)  # neither half-registered nor retried
            _warn(info, "import failed", e)
    # plugins registered by hand (no entry point)
    for name, plugin in pm.list_name_plugin():
        if plugin is not None and name not in infos:
            infos[name] = PluginInfo(name, getattr(plugin, "__name__", type(plugin).__name__))
    return infos


def _call_hooks(pm: pluggy.PluginManager, infos: dict[str, PluginInfo]) -> None:
    hooks = pm.hook
    for impl in hooks.thunder_unavailable_reason.get_hookimpls():
        info = infos[impl.plugin_name]
        if info.error:
            continue
        try:
            reason = impl.function()
        except Exception as e:
            _warn(info, "thunder_unavailable_reason() raised", e)
            continue
        info.unavailable_reason = None if reason is None else str(reason)

    for impl in hooks.thunder_executors.get_hookimpls():
        info = infos[impl.plugin_name]
        if info.error:
            continue
        try:
            result = impl.function()
            executors = list(result or ())
            bad = [x for x in executors if not isinstance(x, Executor)]
            if bad:
                raise TypeError(f"expected thunder.extend.Executor objects, got {type(bad[0]).__name__}")
        except Exception as e:
            _warn(info, "thunder_executors() failed", e)
            continue
        for ex in executors:
            try:
                reason = ex.unavailable_reason()
            except Exception as e:
                reason = f"unavailable_reason() raised {type(e).__name__}: {e}"
            if reason:
                info.skipped.append((ex.name, str(reason)))
            else:
                info.executors.append(ex)

    # hooks that provide an API rather than executors: noted, not called (calling imports the API)
    for impl in hooks.thunder_distributed.get_hookimpls():
        info = infos[impl.plugin_name]
        if not info.error:
            info.provides.append("thunder.distributed")

    for impl in hooks.thunder_transforms.get_hookimpls():
        info = infos[impl.plugin_name]
        if info.error:
            continue
        try:
            transforms = dict(impl.function() or {})
        except Exception as e:
            _warn(info, "thunder_transforms() failed", e)
            continue
        info.transforms.update(transforms)


def plugin_infos(*, reload: bool = False) -> list[PluginInfo]:
    """Every plugin found and what it contributed (loads the plugins on first use).

    Args:
        reload: look for plugins again and call their hooks again (already imported plugin
            modules are not re-imported).
    """
    global _infos
    if _infos is None or reload:
        pm = get_plugin_manager()
        infos = _load_plugins(pm)
        _call_hooks(pm, infos)
        _infos = sorted(infos.values(), key=lambda i: i.name)
    return list(_infos)


def _ordered_plugin_executors(infos: list[PluginInfo]) -> list[Executor]:
    found: list[Executor] = []
    for info in infos:  # sorted by plugin name: a deterministic order among equal priorities
        for ex in info.executors:
            if all(ex is not other and ex.name != other.name for other in found):
                found.append(ex)
    found.sort(key=lambda ex: -getattr(ex, "priority", 0))  # stable: keeps plugin order within a priority
    return found


def discover(*, reload: bool = False) -> tuple[Executor, ...]:
    """The executors installed plugins provide that can run here, by priority, then the default executors.

    The discovered executors are registered (so ``thunder.jit(executors=["name"])`` finds them).
    Use the result as ``thunder.jit(fn, executors=thunder.discover())``. A plugin that fails to
    import or whose hook raises is skipped with one :class:`ThunderPluginWarning`.

    Args:
        reload: look for plugins again instead of reusing the first discovery's result.
    """
    executors = _ordered_plugin_executors(plugin_infos(reload=reload))
    for ex in executors:
        register_executor(ex)
    names = {ex.name for ex in executors}
    return tuple(executors) + tuple(ex for ex in get_default_executors() if ex.name not in names)


def discover_transforms(*, reload: bool = False) -> dict[str, Callable]:
    """The transforms installed plugins provide, by name (a later plugin's name wins on clashes)."""
    out: dict[str, Callable] = {}
    for info in plugin_infos(reload=reload):
        out.update(info.transforms)
    return out


def _describe_executor(ex: Executor) -> str:
    extras = []
    if ex.version is not None:
        extras.append(f"version {ex.version}")
    if getattr(ex, "priority", 0):
        extras.append(f"priority {ex.priority}")
    kind = type(ex).__name__
    return f"{ex.name} ({kind}{', ' + ', '.join(extras) if extras else ''})"


def report(*, file: TextIO | None = None, reload: bool = False) -> None:
    """Prints every plugin found, its version, what it contributed and why anything was skipped.

    ``python -m thunder.plugins`` prints the same.
    """
    file = file if file is not None else sys.stdout
    infos = plugin_infos(reload=reload)
    w = file.write
    w(f"Thunder plugins (entry-point group {ENTRY_POINT_GROUP!r}): {len(infos)} found\n")
    for info in infos:
        dist = ""
        if info.distribution:
            dist = f"  from {info.distribution} {info.version}"
        w(f"\n- {info.name}{dist}\n")
        if info.module:
            w(f"    module: {info.module}\n")
        if info.error:
            w(f"    skipped: {info.error}\n")
            continue
        for ex in info.executors:
            w(f"    executor: {_describe_executor(ex)}\n")
        for name, reason in info.skipped:
            w(f"    executor skipped: {name}: {reason}\n")
        for name in info.transforms:
            w(f"    transform: {name}\n")
        for api in info.provides:
            w(f"    provides: {api}\n")
        if not (info.executors or info.skipped or info.transforms or info.provides):
            reason = info.unavailable_reason or "the plugin gave no reason"
            w(f"    contributed nothing: {reason}\n")
        elif info.unavailable_reason:
            w(f"    note: {info.unavailable_reason}\n")
    w("\nDefault executors: " + ", ".join(ex.name for ex in get_default_executors()) + "\n")
    w("thunder.discover(): " + ", ".join(ex.name for ex in discover()) + "\n")
