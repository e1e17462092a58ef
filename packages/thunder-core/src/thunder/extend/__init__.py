"""The public executor API: executor classes and the executor registry."""

from thunder.executors import pythonex, torchex
from thunder.executors.base import Executor, FusionExecutor, ImplInfo, OperatorExecutor
from thunder.executors.registry import (
    add_always_executor,
    add_default_executor,
    deregister_executor,
    get_all_executors,
    get_always_executors,
    get_default_executors,
    get_executor,
    register_executor,
    remove_default_executor,
)

__all__ = [
    "Executor",
    "OperatorExecutor",
    "FusionExecutor",
    "ImplInfo",
    "register_executor",
    "deregister_executor",
    "get_all_executors",
    "get_default_executors",
    "get_always_executors",
    "add_default_executor",
    "remove_default_executor",
    "get_executor",
]

for _ex in (torchex.ex, pythonex.ex):
    add_always_executor(_ex)
add_default_executor(pythonex.ex, position=0)
add_default_executor(torchex.ex, position=0)
