"""The ``torch_compile`` executor: fuses regions of torch operations with ``torch.compile`` (Inductor).

Each region the shared partitioner (:mod:`thunder.executors.fusion`) forms is lowered to the torch
executor's calls, printed as a Python function, traced to an aten graph and compiled by Inductor the
first time it runs (Inductor's graph compiler, one graph per input signature; no Dynamo). On CPU,
Inductor generates C++/OpenMP kernels and builds them with the machine's C++ compiler (``$CXX`` or
``g++``); on GPU it generates Triton kernels. This is Thunder's CPU fusion executor.

It is not in ``thunder.jit``'s default executor list: compiling costs seconds per region (see
``docs/extending.md`` for measured figures), which only pays off for long-running programs. On a machine
without CUDA, ``thunder.discover()`` includes it (``thunder.plugins``). Or use it with
``thunder.jit(fn, executors=["torch_compile", *thunder.get_default_executors()])``; thunder.jit then
compiles its regions in the background while the first calls run unfused (``thunder.executors.tiers``).

Which regions it compiles (the ones that can pay off; the rule and its measurements are in
docs/extending.md, "Which regions torch_compile compiles"):

- matrix products and convolutions (symbols whose decomposition holds a ``matmul``, ``linear`` or
  ``convolution`` prim) stay with the torch executor: on the CPU Inductor calls the same GEMM and
  convolution kernels PyTorch does, so compiling them buys nothing;
- a region of a single operation that computes is handed back to the torch executor: one operation compiled
  is one kernel, as in eager; views, reshapes and concatenations do not count (Inductor writes them to new
  memory where eager makes a view, so a region of them alone only adds copies);
- a region whose largest computed tensor has fewer than ``min_region_numel`` elements (default ``MIN_REGION_NUMEL``,
  2**16) is handed back too, unless it has ``always_fuse_ops`` computing operations or more (off by default): a
  compiled region's call costs ~7 µs and single-threaded chains of 4+ operations pay from 64 elements
  (``benchmarks/fusion_payoff.py``), but on the vision models' small BatchNorm regions with two threads the fused
  step was slower than the unfused one (docs/extending.md);
- side effects (in-place updates), random draws and opaque fallback operations stay out (below).

Importing this module compiles nothing and does not import Inductor.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import shutil
import threading
from collections.abc import Callable

import torch

from thunder.core.prims import OpTags
from thunder.core.proxies import RuntimeValueProxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.symbolic import hints
from thunder.executors import pythonex, torchex
from thunder.executors.base import FusionExecutor
from thunder.executors.fusion import Region, region_trace

__all__ = ["TorchCompileExecutor", "torch_compile_ex", "graphs_compiled"]

# operations left to the torch executor: side effects (their order matters), random draws (Inductor's
# random numbers differ from eager's), opaque fallbacks (no thunder semantics to rely on)
_EXCLUDED_TAGS = (OpTags.DONT_DCE, OpTags.IN_PLACE, OpTags.RANDOM, "random", "opaque")

# the backwards of matrix products and convolutions: PyTorch's kernels, as the products themselves (rule 1)
_PRODUCT_BACKWARDS = frozenset({"convolution_backward"})

# a region whose largest tensor is smaller than this runs unfused (benchmarks/fusion_payoff.py, docs/extending.md)
MIN_REGION_NUMEL = 65536  # 2**16: 256 KiB of float32


class TorchCompileExecutor(FusionExecutor):
    """A fusion executor compiling each region with ``torch.compile`` (Inductor backend).

    Args:
        name: the executor's name.
        min_region_numel: a region of fewer than ``always_fuse_ops`` computing operations whose largest computed
            tensor has fewer elements than this goes back to the torch executor (the region rule, in the module
            docstring); 0 compiles every region of 2+ operations.
        always_fuse_ops: a region of at least this many computing operations is compiled whatever its size (None:
            no such exception).
        compile_options: keyword arguments for ``torch.compile`` (default: ``dynamic=False``).
    """

    region_name = "torchCompile"
    compiles_slowly = True
    min_region_size = 2

    def __init__(
        self,
        name: str = "torch_compile",
        *,
        min_region_numel: int = MIN_REGION_NUMEL,
        always_fuse_ops: int | None = None,
        **compile_options,
    ):
        super().__init__(name, version=torch.__version__)
        if isinstance(min_region_numel, bool) or not isinstance(min_region_numel, int) or min_region_numel < 0:
            raise ValueError(f"min_region_numel must be a non-negative int, got {min_region_numel!r}")
        if always_fuse_ops is not None and (
            isinstance(always_fuse_ops, bool) or not isinstance(always_fuse_ops, int) or always_fuse_ops < 1
        ):
            raise ValueError(f"always_fuse_ops must be a positive int, got {always_fuse_ops!r}")
        self.min_region_numel = min_region_numel
        self.always_fuse_ops = always_fuse_ops
        self.compile_options = {"dynamic": False, **compile_options}

    def worth_fusing(self, bound_symbols) -> bool:
        """At least ``min_region_size`` operations that compute (views and reshapes do not count), and either
        ``always_fuse_ops`` of them or a computed tensor of at least ``min_region_numel`` elements."""
        computing = [b for b in bound_symbols if _computes(b)]
        if len(computing) < self.min_region_size:
            return False
        if self.min_region_numel == 0 or (self.always_fuse_ops is not None and len(computing) >= self.always_fuse_ops):
            return True
        return _largest_numel(computing) >= self.min_region_numel

    def unavailable_reason(self) -> str | None:
        """Why Inductor cannot compile here (None: it can). Imports neither Dynamo nor Inductor."""
        if importlib.util.find_spec("torch._dynamo") is None:  # pragma: no cover - torch builds without dynamo
            return "torch.compile is unavailable in this torch build (no torch._dynamo)"
        cxx = os.environ.get("CXX", "").strip()
        program = shlex.split(cxx)[0] if cxx else "g++"
        if shutil.which(program) is None:
            where = "$CXX" if cxx else "the compiler Inductor uses when $CXX is not set"
            return f"Inductor's CPU backend needs a C++ compiler, and {program!r} ({where}) is not on PATH"
        return None

    def can_fuse(self, bsym: BoundSymbol) -> bool:
        """Torch-language symbols and prims the torch executor runs, without side effects, randomness or
        matrix products."""
        sym = bsym.sym
        if sym.python_printer is not None or any(tag in sym.tags for tag in _EXCLUDED_TAGS):
            return False
        if any(type(p) is RuntimeValueProxy for p in bsym.flat_outs):
            return False  # a Python value read from tensor data (torch.equal): no graph computes it

        if _has_tag(bsym, (OpTags.MATMUL,)) or sym.name in _PRODUCT_BACKWARDS:
            return False
        impl = torchex.ex.implmap.get(sym.id)
        if (impl is not None and impl.symbol is not None) or sym.executor is torchex.ex:
            return not any(_has_tag(s, _EXCLUDED_TAGS) for s in bsym.subsymbols)
        subs = bsym.subsymbols
        return bool(subs) and all(self.can_fuse(s) for s in subs)

    def fuse_region(self, region: Region) -> Callable:
        """Lowers ``region`` to torch calls and compiles the resulting function with Inductor.

        With the default options the function is traced to an aten graph (``make_fx``) and compiled by
        Inductor's graph compiler, once per input signature (shapes, dtypes, devices, number values): no
        Dynamo frame evaluation and guards on each call, which cost ~50 µs a region, more than many regions
        save (see :class:`_InductorRegion`). Other ``compile_options`` (a ``mode``, ``dynamic=True``) go
        through ``torch.compile``.
        """
        trace = region_trace(region, [torchex.ex, pythonex.ex])
        fn = trace.python_callable()
        if self.compile_options != {"dynamic": False}:
            compiled = torch.compile(fn, **self.compile_options)

            # A region runs inside the program's forward or backward, where autograd records nothing, but its
            # inputs may say requires_grad (a training forward's arguments, saved values) or have any strides (a
            # cotangent expanded from a sum's gradient), and Dynamo guards on both. Detached contiguous inputs
            # let the code compiled from example inputs (thunder.jit's background compile) serve every call.
            def run_region(*args):
                return compiled(*[_plain(a) if isinstance(a, torch.Tensor) else a for a in args])

            run_region.__wrapped__ = compiled
        else:
            static = all(isinstance(p, TensorProxy) and all(isinstance(n, int) for n in p.shape) for p in region.inputs)
            run_region = _InductorRegion(fn, static=static)
        run_region.__thunder_trace__ = trace
        return run_region


class _InductorRegion:
    """A region's function compiled by Inductor without Dynamo: one compiled graph per input signature.

    The function is traced to an aten graph (``make_fx`` with Inductor's decompositions) and compiled by
    Inductor's graph compiler (``compile_fx_inner``), whose compiled graph takes its inputs as one list:
    neither Dynamo nor AOTAutograd's runtime wrappers run on a call.

    Inputs are made contiguous first (as for ``torch.compile`` above), so that the signature is only shapes,
    dtypes and devices (and the values of number inputs, which the graph holds as constants). After
    ``MAX_SIGNATURES`` signatures (sizes that change from call to call) it hands over to ``torch.compile`` with
    dynamic sizes.

    A *static* region (only tensor inputs, of sizes the trace fixed: its program's prologue checks every
    input's shape, dtype and device) has one signature: after its compile a call only makes non-contiguous
    inputs contiguous and calls the graph (a few microseconds). A CNN's training step at batch 2 calls about a
    hundred regions.
    """

    MAX_SIGNATURES = 8

    def __init__(self, fn: Callable, static: bool = False):
        self.fn = fn
        self.static = static
        self.compiled: dict[tuple, Callable] = {}
        self.dynamic: Callable | None = None
        self._lock = threading.Lock()
        self._graph: Callable | None = None  # a static region's compiled graph, once compiled

    def __call__(self, *args):
        graph = self._graph
        if graph is not None and not torch.is_grad_enabled():
            return graph([a if a.is_contiguous() else a.contiguous() for a in args])
        plain = [_plain(a) if isinstance(a, torch.Tensor) else a for a in args]
        key = tuple((a.shape, a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a), a) for a in plain)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self._compile(key, plain)
        return compiled(*plain)

    def _compile(self, key: tuple, plain: list) -> Callable:
        with self._lock:
            compiled = self.compiled.get(key)
            if compiled is not None:
                return compiled
            if len(self.compiled) >= self.MAX_SIGNATURES:
                if self.dynamic is None:
                    self.dynamic = torch.compile(self.fn, dynamic=True)
                return self.dynamic
            from torch._inductor import config as inductor_config
            from torch._inductor.compile_fx import compile_fx_inner
            from torch._inductor.decomposition import select_decomp_table
            from torch.fx.experimental.proxy_tensor import make_fx

            # (no size asserts in the compiled code: this wrapper and the program's prologue check what they would,
            # and they cost ~0.7 µs per input and call)
            with torch.no_grad(), inductor_config.patch(size_asserts=False):
                graph = make_fx(self.fn, tracing_mode="fake", decomposition_table=select_decomp_table())(*plain)
                graph_call = compile_fx_inner(graph, plain)

            def compiled(*args):
                return graph_call(list(args))

            self.compiled[key] = compiled
            if self.static:
                self._graph = graph_call
            global _graphs_compiled
            _graphs_compiled += 1
            return compiled


_graphs_compiled = 0


def graphs_compiled() -> int:
    """How many graphs this process's regions compiled with Inductor directly (without Dynamo)."""
    return _graphs_compiled


def _computes(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` computes values, rather than only viewing or rearranging its input: not a view, and some
    primitive of its decomposition is no shape operation. (Inductor writes a compiled region's views and
    concatenations to new memory, where eager only makes a view: a region of them alone is pure cost.)"""
    if "view" in bsym.sym.tags:
        return False
    if not bsym.subsymbols:
        return OpTags.SHAPE_OP not in bsym.sym.tags
    return any(_computes(s) for s in bsym.subsymbols)


def _largest_numel(bound_symbols) -> int:
    """The element count of the largest tensor the bound symbols compute. (Not the ones they read: an embedding
    reads its whole table to write a few rows, and a region around it has little to fuse.)"""
    largest = 0
    for bsym in bound_symbols:
        for p in bsym.flat_outs:
            if isinstance(p, TensorProxy):
                largest = max(largest, math.prod(hints(p.shape)))
    return largest


def _plain(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def _has_tag(bsym: BoundSymbol, tags: tuple) -> bool:
    """Whether ``bsym`` or any symbol of its decomposition carries one of ``tags``."""
    return any(tag in bsym.sym.tags for tag in tags) or any(_has_tag(s, tags) for s in bsym.subsymbols)


torch_compile_ex = TorchCompileExecutor()
