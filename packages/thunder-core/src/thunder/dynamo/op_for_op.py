"""Whether a Thunder region has anything to gain over running Dynamo's graph as it is.

A ThunderFX region whose compiled program calls PyTorch's own kernels one operation at a time (the
``torch``, ``sdpa`` and ``python`` executors: no fusion, no other executor's kernel, no user
transform) computes what Dynamo's FX graph of the region computes, with the same kernels, but pays
Thunder's per-call cost on top: the prologue's checks, the ``autograd.Function`` that carries
Thunder's backward, and a backward that runs as Python instead of PyTorch's autograd nodes. For the
small regions graph breaks leave behind (a loss, a mixture-of-experts router) that cost is larger
than the region's work. Such a region runs Dynamo's graph after its first call (see
``ThunderCompiler(op_for_op=...)`` and docs/dynamo.md).
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["PYTORCH_KERNEL_EXECUTORS", "op_for_op_reason"]

# the core executors whose implementations are calls of PyTorch's own kernels (or plain Python), one per operation
PYTORCH_KERNEL_EXECUTORS = ("torch", "sdpa", "python")


def _executors_of(traces: Iterable) -> set[str]:
    names = set()
    for trace in traces:
        for bsym in trace.bound_symbols:
            executor = bsym.sym.executor
            names.add("python" if executor is None else executor.name)  # (None: unpacking, as Python does)
    return names


def op_for_op_reason(thunder_module, thunder_options: dict) -> str | None:
    """Why ``thunder_module``'s last compiled program has nothing to gain over Dynamo's graph, or None.

    Nothing to gain means: no transform was given to ``thunder.jit`` (``transforms=``,
    ``disable_torch_autograd=``), no fusion executor is in its executor list (a fusion executor may
    compile its fused program in the background, after the first call), and every operation of the
    forward program and of the backward program, if there is one, runs on one of
    ``PYTORCH_KERNEL_EXECUTORS``.
    """
    import thunder
    from thunder.extend import FusionExecutor

    if thunder_options.get("transforms") or thunder_options.get("disable_torch_autograd"):
        return None
    cd = thunder.compile_data(thunder_module)
    if any(isinstance(ex, FusionExecutor) for ex in cd.executors):
        return None
    stats = cd.stats
    programs = [t[-1] for t in (stats.last_traces, stats.last_backward_traces) if t]
    if not programs:
        return None
    used = _executors_of(programs)
    if not used <= set(PYTORCH_KERNEL_EXECUTORS):
        return None
    return f"Thunder's program calls PyTorch's kernels one operation at a time (executors {', '.join(sorted(used))})"
