"""The public executor API: executor classes and the executor registry."""

from thunder.executors import pythonex, sdpaex, torch_compile, torchex
from thunder.executors.base import Executor, FusionExecutor, ImplInfo, OperatorExecutor
from thunder.executors.passes import EXECUTORS_TAG, claim_bound_symbols
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
from thunder.executors.rematerialization import (
    is_cheap_to_recompute,
    rematerialize_forward_backward,
    saved_for_backward,
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
    "rematerialize_forward_backward",
    "saved_for_backward",
    "is_cheap_to_recompute",
    "claim_bound_symbols",
    "trace_executors",
]


def trace_executors(trace) -> tuple[Executor, ...]:
    """The executors the claiming pass handed ``trace``'s bound symbols to (empty for a trace not claimed yet).

    A fusion executor's ``fusion_pass`` (or a pass executor's) that records new bound symbols into a
    claimed trace claims them with ``claim_bound_symbols(bsyms, trace_executors(trace), trace)``.
    """
    return tuple(trace.tags.get(EXECUTORS_TAG, ()))


for _ex in (torchex.ex, pythonex.ex):
    add_always_executor(_ex)
add_default_executor(pythonex.ex, position=0)
add_default_executor(torchex.ex, position=0)
# sdpa: PyTorch's own fused attention kernels, no compile cost; first so it sees attention before torch
add_default_executor(sdpaex.sdpa_ex, position=0)
# torch_compile: registered (jit(executors=["torch_compile", ...])) but not default: Inductor compiles
# each region on first call, which costs seconds on CPU (see docs/extending.md); thunder.discover()
# includes it on CPU, where its regions compile in the background
register_executor(torch_compile.torch_compile_ex)
