"""Plugin discovery: executors (and transforms) that separately installed packages provide.

Plugins are modules named by entry points in the ``thunder`` group (see
``thunder.plugins.hookspecs`` for the hooks and the rules plugins follow). Nothing is loaded
when Thunder is imported: the first call of ``discover``, ``plugin_infos``,
``discover_transforms`` or ``report`` loads the plugins (through pluggy's
``load_setuptools_entrypoints``), calls their hooks once each and remembers the result.

``thunder.discover()`` returns the executors the plugins provide that can run here, highest
``priority`` first, then the CPU fusion executor ``torch_compile`` (Inductor) on machines without a CUDA
device where no plugin provides a fusion executor and a C++ compiler is on PATH, followed by the default executors, so that
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

from thunder.executors.base import Executor, FusionExecutor
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

    Plugins are loaded into it by the first ``discover`` (or ``plugin_infos``); a plugin
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


def _note(info: PluginInfo, message: str) -> None:
    """Warns about a hook result Thunder could still use (the plugin is not skipped)."""
    where = f" ({info.module})" if info.module else ""
    warnings.warn(f"thunder plugin {info.name!r}{where}: {message}", ThunderPluginWarning, stacklevel=4)


def _as_executor_list(info: PluginInfo, result: object) -> list[Executor]:
    """The executors a ``thunder_executors()`` hook returned, tolerating the usual slips with a warning."""
    if result is None:
        _note(info, "thunder_executors() returned None; return a list of executors (an empty one if none)")
        return []
    if isinstance(result, Executor):
        _note(info, f"thunder_executors() returned the executor {result.name!r} instead of a list of executors")
        return [result]
    if isinstance(result, (str, bytes)) or not hasattr(result, "__iter__"):
        raise TypeError(f"expected a list of thunder.extend.Executor objects, got {type(result).__name__}")
    executors = list(result)
    bad = [x for x in executors if not isinstance(x, Executor)]
    if bad:
        raise TypeError(f"expected thunder.extend.Executor objects, got {type(bad[0]).__name__}")
    return executors


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
        if reason is not None and not isinstance(reason, str):
            _note(info, f"thunder_unavailable_reason() returned a {type(reason).__name__}, not a str or None")
        info.unavailable_reason = None if reason is None else str(reason)

    for impl in hooks.thunder_executors.get_hookimpls():
        info = infos[impl.plugin_name]
        if info.error:
            continue
        try:
            executors = _as_executor_list(info, impl.function())
        except Exception as e:
            _warn(info, "thunder_executors() failed", e)
            continue
        for ex in executors:
            try:
                reason = ex.unavailable_reason()
            except Exception as e:
                reason = f"unavailable_reason() raised {type(e).__name__}: {e}"
            if reason is not None and not isinstance(reason, str):
                _note(info, f"{ex.name}.unavailable_reason() returned a {type(reason).__name__}, not a str or None")
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
            result = impl.function()
            if result is None:
                _note(info, "thunder_transforms() returned None; return a dict of transforms (an empty one if none)")
            transforms = dict(result or {})
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
    import or whose hook raises is skipped with one ``ThunderPluginWarning``.

    On a machine without a CUDA device, when no discovered executor fuses (no ``FusionExecutor``), the
    ``torch_compile`` executor comes after the plugins' executors, so that the CPU fuses too: regions of elementwise and
    reduction operations on large enough tensors compile with Inductor in the background while the first
    calls run unfused (the region rule: ``thunder.executors.torch_compile``; docs/extending.md). It is left
    out, silently, where Inductor cannot build its kernels (no C++ compiler: ``$CXX``, or ``g++``, is not on
    ``PATH``); ``python -m thunder.plugins`` says why. Discovering imports neither Dynamo nor Inductor.

    Args:
        reload: look for plugins again instead of reusing the first discovery's result.
    """
    executors = _ordered_plugin_executors(plugin_infos(reload=reload))
    for ex in executors:
        register_executor(ex)
    fusion = _cpu_fusion_executor(executors)
    if fusion is not None:
        executors.append(fusion)
    names = {ex.name for ex in executors}
    return tuple(executors) + tuple(ex for ex in get_default_executors() if ex.name not in names)


def _cpu_fusion_executor(discovered: list[Executor]) -> Executor | None:
    """``torch_compile`` on a machine without a CUDA device, when no discovered executor fuses and Inductor can
    build its kernels here; else None. (Its region rule was measured on CPUs: on a GPU, plugins fuse.)"""
    import torch

    from thunder.executors.torch_compile import torch_compile_ex

    if any(isinstance(ex, FusionExecutor) for ex in discovered) or torch.cuda.is_available():
        return None
    return torch_compile_ex if torch_compile_ex.is_available() else None


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


def _short(reason: str) -> str:
    """The leading clause of a reason: its first line, up to the first ``"; "`` or parenthesis."""
    short = reason.strip().splitlines()[0] if reason.strip() else reason
    for sep in ("; ", " ("):
        cut = short.find(sep)
        if cut > 0:
            short = short[:cut]
    return short


def _plugin_line(info: PluginInfo, verbose: bool) -> list[str]:
    """One line for the plugin (what it gave, or the reason it gave nothing), then details when verbose."""
    shorten = (lambda r: r) if verbose else _short
    head = f"- {info.name}"
    if info.distribution:
        head += f" ({info.distribution} {info.version})"
    details = [f"    module: {info.module}"] if verbose and info.module else []
    if info.error:
        return [f"{head}: skipped: {shorten(info.error)}", *details]
    parts = [f"executor: {_describe_executor(ex)}" for ex in info.executors]
    parts += [f"transform: {name}" for name in info.transforms]
    parts += [f"provides: {api}" for api in info.provides]
    if not parts:
        reason = info.unavailable_reason or (info.skipped[0][1] if info.skipped else "the plugin gave no reason")
        lines = [f"{head}: contributed nothing: {shorten(reason)}", *details]
        if verbose:
            lines += [f"    executor skipped: {name}: {r}" for name, r in info.skipped if r != reason]
        return lines
    lines = [f"{head}: {'; '.join(parts)}", *details]
    lines += [f"    executor skipped: {name}: {shorten(r)}" for name, r in info.skipped]
    if verbose and info.unavailable_reason:
        lines.append(f"    note: {info.unavailable_reason}")
    return lines


def report(*, file: TextIO | None = None, reload: bool = False, verbose: bool = False) -> None:
    """Prints every plugin found, one line each: what it contributed, or why it contributed nothing.

    ``python -m thunder.plugins`` prints the same (``--verbose``: the full reasons and each
    plugin's module).

    Args:
        file: where to print (default: standard output).
        reload: look for plugins again first.
        verbose: print the whole of each reason (by default only its leading clause) and the modules.
    """
    file = file if file is not None else sys.stdout
    infos = plugin_infos(reload=reload)
    lines = [f"Thunder plugins (entry-point group {ENTRY_POINT_GROUP!r}): {len(infos)} found"]
    for info in infos:
        lines += _plugin_line(info, verbose)
    lines.append("Default executors: " + ", ".join(ex.name for ex in get_default_executors()))
    lines.append("thunder.discover(): " + ", ".join(ex.name for ex in discover()))
    from thunder.executors.torch_compile import torch_compile_ex

    if (reason := torch_compile_ex.unavailable_reason()) is not None:
        lines.append(f"CPU fusion (torch_compile) left out of thunder.discover(): {reason}")
    reasons = [r for info in infos for r in (info.error, info.unavailable_reason) if r]
    reasons += [r for info in infos for _, r in info.skipped]
    if not verbose and any(_short(r) != r.strip() for r in reasons):
        lines.append("(python -m thunder.plugins --verbose prints the full reasons)")
    file.write("\n".join(lines) + "\n")
