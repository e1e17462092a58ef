"""The python executor: Python-level constructs in traces (returns, ``del``, unpacking, checks)."""

from __future__ import annotations

from thunder.core import prims
from thunder.executors.base import OperatorExecutor

ex = OperatorExecutor("python")
for _sym in (prims.python_return, prims.python_del):
    _sym.executor = ex
