"""The module the ``thunder`` entry point names: Thunder's hooks, and nothing expensive at import.

Importing this module only defines functions; the executor is built the first time Thunder asks
for it (``thunder_executors``), so ``thunder.discover()`` stays cheap for users who never use it.
"""

from __future__ import annotations

import os

from thunder.plugins import hookimpl

_DISABLE_VARIABLE = "THUNDER_EXAMPLE_EXECUTOR_DISABLE"


def _unavailable() -> str | None:
    # A real plugin checks its runtime here (is nvFuser importable? is there a GPU?).
    if os.environ.get(_DISABLE_VARIABLE):
        return f"disabled by the {_DISABLE_VARIABLE} environment variable"
    return None


@hookimpl
def thunder_unavailable_reason() -> str | None:
    return _unavailable()


@hookimpl
def thunder_executors() -> list:
    if _unavailable() is not None:
        return []
    from thunder_example_executor.executor import example_ex

    return [example_ex]
