"""``thunder.distributed``: data-parallel training (``ddp``, ``fsdp``), provided by the thunder-distributed package.

Core only forwards attribute lookups to whatever module a plugin returns from the
``thunder_distributed()`` hook (see :mod:`thunder.plugins.hookspecs`). Without such a plugin
every lookup raises an ``ImportError`` that says how to install it.
"""

from __future__ import annotations

from typing import Any

__all__: list[str] = []

_INSTALL_HINT = (
    "thunder.distributed needs the thunder-distributed package: `pip install thunder-distributed` "
    "(in this repository: `pip install -e packages/thunder-distributed`)"
)


class DistributedNotInstalledError(ImportError):
    """``thunder.distributed.<name>`` was used but no plugin provides ``thunder.distributed``."""


def _provider() -> Any | None:
    from thunder.plugins import get_plugin_manager, plugin_infos

    plugin_infos()  # loads the installed plugins once
    for impl in get_plugin_manager().hook.thunder_distributed.get_hookimpls():
        try:
            provided = impl.function()
        except Exception as e:  # a broken plugin must not hide the reason
            raise ImportError(
                f"the thunder plugin {impl.plugin_name!r} failed to provide thunder.distributed: {e}"
            ) from e
        if provided is not None:
            return provided
    return None


def __getattr__(name: str) -> Any:
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    provider = _provider()
    if provider is None:
        raise DistributedNotInstalledError(f"thunder.distributed.{name}: {_INSTALL_HINT}")
    try:
        return getattr(provider, name)
    except AttributeError:
        raise AttributeError(f"module 'thunder.distributed' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    provider = _provider()
    names = set(globals())
    if provider is not None:
        names.update(getattr(provider, "__all__", dir(provider)))
    return sorted(names)
