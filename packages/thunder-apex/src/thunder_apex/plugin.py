"""The module the ``thunder`` entry point names: Thunder's plugin hooks for thunder-apex.

Importing it is cheap (no apex, no CUDA): the availability check only locates apex and its
xentropy extension, and the executor is imported when Thunder asks for it.
"""

from __future__ import annotations

from thunder.plugins import hookimpl
from thunder_apex import runtime


@hookimpl
def thunder_unavailable_reason() -> str | None:
    """``"apex not installed"``, ``"apex built without xentropy"``, or ``None``."""
    return runtime.unavailable_reason()


@hookimpl
def thunder_executors() -> list:
    """``[apex_ex]`` where apex with its xentropy extension is installed, else ``[]``."""
    if runtime.unavailable_reason() is not None:
        return []
    from thunder_apex import apex_ex

    return [apex_ex]
