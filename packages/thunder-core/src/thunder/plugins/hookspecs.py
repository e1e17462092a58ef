"""The hooks a Thunder plugin may implement, and the markers for them.

A plugin is a module named by an entry point in the ``thunder`` group of its distribution:

    [project.entry-points.thunder]
    myex = "my_package.plugin"

That module implements any of the hooks below as plain functions marked with
``hookimpl``:

    from thunder.plugins import hookimpl

    @hookimpl
    def thunder_executors():
        from my_package.executor import my_ex  # import (and build) lazily
        return [my_ex]

Rules for plugin modules, so that discovering plugins stays cheap and safe:

- Importing the plugin module must be cheap: no CUDA initialisation, no kernel compilation, no
  import of heavy optional runtimes. Do that work inside the hooks, or later, when an executor
  first runs.
- A plugin whose runtime is missing (no nvFuser, no GPU, a too-old driver) still imports. Its
  ``thunder_executors()`` returns an empty list and its ``thunder_unavailable_reason()`` says why;
  alternatively it returns its executors and their ``Executor.unavailable_reason()`` says why each
  cannot run here. Either way ``thunder.discover()`` drops them and
  ``thunder.plugins.report()`` prints the reason.
- An exception raised on import or in a hook is caught: Thunder warns once, naming the plugin
  and the error, and carries on with the other plugins.

Each hook is called once per plugin (never combined across plugins), so that one plugin's
failure cannot hide another's results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from thunder.executors.base import Executor

__all__ = [
    "PROJECT_NAME",
    "ENTRY_POINT_GROUP",
    "hookspec",
    "hookimpl",
    "thunder_executors",
    "thunder_unavailable_reason",
    "thunder_transforms",
    "thunder_distributed",
]

#: pluggy project name of Thunder's hooks
PROJECT_NAME = "thunder"
#: the entry-point group plugins are found in
ENTRY_POINT_GROUP = "thunder"

#: marks the hook specifications below
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: marks a plugin's hook implementations
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def thunder_executors() -> Sequence[Executor]:
    """The executors this plugin provides, with their operators, implementations and grad transforms registered.

    Return an empty sequence when the plugin's runtime is missing (and implement
    ``thunder_unavailable_reason`` to say why). Executors whose ``unavailable_reason()``
    returns a string are dropped by ``thunder.discover()``. ``Executor.priority`` (higher first)
    orders the executors ``thunder.discover()`` returns.
    """


@hookspec
def thunder_unavailable_reason() -> str | None:
    """Why this plugin contributes nothing on this machine (e.g. ``"nvFuser is not installed"``), else ``None``."""


@hookspec
def thunder_transforms() -> Mapping[str, Callable]:
    """Named trace transforms (``trace -> trace`` callables) this plugin provides, for ``thunder.jit(transforms=...)``.

    Listed by ``thunder.plugins.report()`` and returned by ``thunder.plugins.discover_transforms()``.
    """


@hookspec
def thunder_distributed() -> object:
    """The module (or namespace) behind ``thunder.distributed``: ``ddp``, ``fsdp`` and friends.

    Implemented by the thunder-distributed package; the first plugin returning something wins.
    """
