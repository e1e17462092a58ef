"""Helpers shared by the tests: traces over CUDA proxies (no GPU needed) and the nvFuser stand-in."""

from __future__ import annotations

import pytest
import torch

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.executors import pythonex, torchex
from thunder.executors.passes import claim_executors, dce
from thunder_nvfuser import runtime


def _cuda_and_nvfuser() -> str | None:
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (none here)"
    if runtime.installed_module() is None:
        return "needs nvFuser (nvfuser_direct not installed; see the README for the wheel)"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _cuda_and_nvfuser()
    if reason is None:
        return
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


def cuda_trace(fn, *examples: torch.Tensor, device: str = "cuda:0") -> TraceCtx:
    """Traces ``fn`` (written with tensor methods and ``thunder.torch``) on proxies of ``examples`` on ``device``.

    No CUDA tensor is created: the proxies only say they live on ``device``.
    """
    trace = TraceCtx("fn")
    with tracectx(trace):
        proxies = [TensorProxy(shape=e.shape, dtype=e.dtype, device=device) for e in examples]
        trace.args = proxies
        prims.python_return(fn(*proxies))
    return trace


def fuse(trace: TraceCtx, ex) -> TraceCtx:
    """Claiming with ``[ex, torch, python]``, ``ex``'s fusion pass and DCE, as ``thunder.jit`` runs them."""
    claimed = claim_executors(trace, [ex, torchex.ex, pythonex.ex])
    return dce(ex.fusion_pass(claimed))


def fusion_bsyms(trace: TraceCtx, ex) -> list:
    return [b for b in trace.bound_symbols if b.sym.executor is ex]
