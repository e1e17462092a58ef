"""The module the ``thunder`` entry point names: Thunder's hooks, cheap to import.

``thunder_executors()`` returns the ``nvfuser`` executor only when torch is a CUDA build, a CUDA
device is present and nvFuser is installed, fits the running torch and imports; otherwise
``thunder_unavailable_reason()`` says why in one line (the decisive reason first, then the fix),
and ``thunder.plugins.report()`` prints it.
"""

from __future__ import annotations

from thunder.plugins import hookimpl
from thunder_nvfuser import runtime


@hookimpl
def thunder_unavailable_reason() -> str | None:
    return runtime.unavailable_reason()


@hookimpl
def thunder_executors() -> list:
    if runtime.unavailable_reason() is not None:
        return []
    from thunder_nvfuser.executor import nvfuser_ex

    return [nvfuser_ex]
