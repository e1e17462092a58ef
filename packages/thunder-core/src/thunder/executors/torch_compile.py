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

- convolutions and their backward stay with the torch executor (the channels-last pass,
  ``thunder.transforms.conv_layout``, chooses their layout; Inductor's own choice made ResNet-18's step 2x eager's);
- matrix products (symbols whose decomposition holds a ``matmul`` or ``linear`` prim) join the regions around
  them (``fuse_matmuls``): Inductor calls the same GEMM kernels PyTorch does, but one graph then spans the
  operations on both sides of a product, which spares a region call and the Python between regions per product
  (a transformer's training step: ViT 0.98 -> 0.87x eager, LeViT 0.96 -> 0.84x, docs/extending.md);
- a region of a single operation that computes is handed back to the torch executor: one operation compiled
  is one kernel, as in eager; views, reshapes and concatenations do not count (Inductor writes them to new
  memory where eager makes a view, so a region of them alone only adds copies);
- a region whose largest computed tensor has fewer than ``min_region_numel`` elements (default ``MIN_REGION_NUMEL``,
  2**16) is handed back too, unless it has ``always_fuse_ops`` computing operations or more (default
  ``ALWAYS_FUSE_OPS``, 4), a composite counting the primitives it decomposes to (a batch norm and its ReLU: a
  dozen): a compiled region's call costs ~7 µs and single-threaded chains of 4+ operations pay from 64 elements
  (``benchmarks/fusion_payoff.py``); a tiny HF Llama's decode step, one region then, takes 0.72 ms a token against
  1.36 unfused (docs/extending.md);
- side effects (in-place updates), random draws and opaque fallback operations stay out (below), except the
  program's write-backs into its arguments of values a region computes (BatchNorm's running statistics), which the
  region does itself (``fuses_write_backs``, :class:`thunder.executors.fusion._WriteBacks`).

Importing this module compiles nothing and does not import Inductor.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import os
import shlex
import shutil
import threading
from collections.abc import Callable

import torch

from thunder.core.aliasing import OPAQUE_KEEPING_RNG_STATE
from thunder.core.prims import OpTags
from thunder.core.proxies import NumberProxy, RuntimeValueProxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.symbolic import SizeProxy, hints
from thunder.executors import inductor_subprocess, pythonex, symbolic_graphs, tiers, torchex
from thunder.executors.base import FusionExecutor
from thunder.executors.fusion import Region, region_trace
from thunder.executors.passes import del_last_used, is_write_back

__all__ = ["TorchCompileExecutor", "torch_compile_ex", "graphs_compiled"]

# operations left to the torch executor: side effects (their order matters), random draws (Inductor's
# random numbers differ from eager's), opaque fallbacks (no thunder semantics to rely on)
# (and an opaque op's forward and backward for autodiff: they read and set the generator's state, which a traced graph
# holds as a fake tensor)
_EXCLUDED_TAGS = (
    OpTags.DONT_DCE,
    OpTags.IN_PLACE,
    OpTags.RANDOM,
    "random",
    "opaque",
    "opaque_backward",
    OPAQUE_KEEPING_RNG_STATE,
)

# the backward of convolutions: PyTorch's kernel, as the convolutions themselves (rule 1)
_CONVOLUTION_BACKWARDS = frozenset({"convolution_backward"})

# how long the compile subprocess waits for more work once the background worker has none
SUBPROCESS_LINGER_S = 10.0

# a region whose largest tensor is smaller than this runs unfused (benchmarks/fusion_payoff.py, docs/extending.md)
MIN_REGION_NUMEL = 65536  # 2**16: 256 KiB of float32
# a region of at least this many computing operations is compiled whatever its size (docs/extending.md)
ALWAYS_FUSE_OPS = 4


class TorchCompileExecutor(FusionExecutor):
    """A fusion executor compiling each region with ``torch.compile`` (Inductor backend).

    Args:
        name: the executor's name.
        min_region_numel: a region of fewer than ``always_fuse_ops`` computing operations whose largest computed
            tensor has fewer elements than this goes back to the torch executor (the region rule, in the module
            docstring); 0 compiles every region of 2+ operations.
        always_fuse_ops: a region of at least this many computing operations (a composite counting the
            primitives of its decomposition) is compiled whatever its size (None: no such exception; default
            ``ALWAYS_FUSE_OPS``).
        fuse_matmuls: matrix products (``matmul``, ``linear``, ``bmm``...) join regions (convolutions never do):
            Inductor calls the same GEMM kernels, but the regions on either side of a product merge into one graph,
            with its views and bias additions, which spares a region call and the Python between them per product.
        compile_options: keyword arguments for ``torch.compile`` (default: ``dynamic=False``).
    """

    region_name = "torchCompile"
    compiles_slowly = True
    fuses_write_backs = True  # (Inductor compiles a graph's writes into its inputs into its kernels)
    min_region_size = 2

    def __init__(
        self,
        name: str = "torch_compile",
        *,
        min_region_numel: int = MIN_REGION_NUMEL,
        always_fuse_ops: int | None = ALWAYS_FUSE_OPS,
        fuse_matmuls: bool = True,
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
        self.fuse_matmuls = bool(fuse_matmuls)
        self.compile_options = {"dynamic": False, **compile_options}

    def worth_fusing(self, bound_symbols) -> bool:
        """At least ``min_region_size`` operations that compute (views and reshapes do not count), and either
        ``always_fuse_ops`` primitive operations among them (a composite counts its decomposition's) or a computed
        tensor of at least ``min_region_numel`` elements."""
        computing = [b for b in bound_symbols if _computes(b)]
        if len(computing) < self.min_region_size:
            return False
        if self.min_region_numel == 0:
            return True
        if self.always_fuse_ops is not None and sum(map(_primitive_operations, computing)) >= self.always_fuse_ops:
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

        if _has_convolution(bsym) or (not self.fuse_matmuls and _has_tag(bsym, (OpTags.MATMUL,))):
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
        # (with each value deleted after its last use: the region's own torch operations run while a graph for new
        # input layouts or sizes compiles, and held every intermediate until they returned: 28 MiB more than the
        # graph at the peak of a 4-layer LitGPT training step)
        runnable = del_last_used(trace)
        fn = runnable.python_callable()
        written = {b.args[1].name for b in region.bound_symbols if is_write_back(b)}
        # the inputs the region writes (its write-backs, thunder.executors.fusion): never copied for the graph
        written_inputs = tuple(i for i, p in enumerate(region.inputs) if p.name in written)
        if self.compile_options != {"dynamic": False}:
            compiled = torch.compile(fn, **self.compile_options)

            # A region runs inside the program's forward or backward, where autograd records nothing, but its
            # inputs may say requires_grad (a training forward's arguments, saved values) or have any strides (a
            # cotangent expanded from a sum's gradient), and Dynamo guards on both. Detached contiguous inputs
            # let the code compiled from example inputs (thunder.jit's background compile) serve every call.
            def run_region(*args):
                if not all(args[i].is_contiguous() for i in written_inputs):
                    return fn(*args)  # (a contiguous copy of an input the region writes would take the write)
                return compiled(*[_plain(a) if isinstance(a, torch.Tensor) else a for a in args])

            run_region.__wrapped__ = compiled
        else:
            static = all(isinstance(p, TensorProxy) and all(isinstance(n, int) for n in p.shape) for p in region.inputs)
            source = runnable.python(include_decomposition=False)
            run_region = _InductorRegion(
                fn,
                static=static,
                portable=inductor_subprocess.PortableFunction.of(fn, source),
                symbolic_dims=None if static else _symbolic_dims(region.inputs),
                written_inputs=written_inputs,
            )
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
    dynamic sizes. A region whose trace has symbolic sizes (``symbolic_dims``) compiles instead one graph with
    those sizes symbolic and guards (:mod:`thunder.executors.symbolic_graphs`), which serves every size.

    A *static* region (only tensor inputs, of sizes the trace fixed: its program's prologue checks every
    input's shape, dtype and device) has one signature: after its compile a call with contiguous inputs only
    calls the graph (a few microseconds). A CNN's training step at batch 2 calls about a hundred regions.

    A static region also learns the layouts its inputs come in. The trace does not know strides, so the first
    graph is compiled for contiguous inputs; but a region's inputs are often permuted in a fixed way (a channels-last
    feature map, attention gradients in ``[b, s, h, d]`` order), and copying them to contiguous each call can cost
    more than the fusion saves. When a call meets non-contiguous inputs whose strides it has no graph for, it
    copies them as before and queues a compile for exactly those strides on the background worker
    (``tiers.submit_compile``, waited for by ``thunder.wait_for_fusion``); later calls with the same strides call that
    graph. A graph is only ever called with the exact strides it was compiled for (Inductor's code assumes them);
    a region learns at most ``MAX_LAYOUTS`` of them. Expanded inputs (a sum's cotangent) count: a region only
    reads its inputs, and reading an expanded one in place spares materialising it.

    Until the graph for new strides is in place, the region runs its own torch operations on the inputs as they
    are, not the contiguous graph on copies: their results have the layouts eager's kernels give (which the
    learned graph gives too, Inductor keeping the traced graph's output strides), so the regions downstream meet,
    in the same call, the layouts they will meet from then on, and queue their compiles for them. A chain of
    regions in channels-last (a CNN's) learns its layouts in one call and one wait, not one region per call.
    """

    MAX_SIGNATURES = 8
    MAX_LAYOUTS = 4
    MAX_SYMBOLIC_GRAPHS = 4

    def __init__(
        self,
        fn: Callable,
        static: bool = False,
        portable: inductor_subprocess.PortableFunction | None = None,
        symbolic_dims: tuple | None = None,
        written_inputs: tuple[int, ...] = (),
    ):
        self.fn = fn
        # the positions of the inputs the region writes in place: a call where one is not contiguous runs the
        # region's own torch operations (a graph is called with contiguous copies, which would take the write)
        self.written_inputs = written_inputs
        self.static = static
        # a symbolic region's symbolic dimensions per input (``symbolic_graphs.compile_symbolic_graph``'s ``dynamic``)
        self.symbolic_dims = symbolic_dims
        self._symbolic: tuple[symbolic_graphs.SymbolicGraph, ...] = ()
        self._symbolic_pending = False  # a compile for inputs no graph serves is queued
        self._symbolic_failed = False  # compiling with symbolic sizes raised: one graph per signature instead
        self.portable = portable  # (fn as the compile subprocess rebuilds it; None: it cannot)
        self.compiled: dict[tuple, Callable] = {}
        self.dynamic: Callable | None = None
        self._lock = threading.Lock()
        self._graph: Callable | None = None  # a static region's compiled graph, once compiled
        # a static region's graphs for the input strides it met (None: a compile is queued or failed)
        self._layouts: dict[tuple, Callable | None] = {}

    def __call__(self, *args):
        return self.call_boxed(list(args))

    def call_boxed(self, args: list):
        """The call with the inputs in a list, which the compiled graph empties: each input the caller no longer
        holds (the program deletes those it used last here before the call) is freed after the graph's last use of
        it, as eager frees it after its last operation (``passes.boxed_region_call``)."""
        for i in self.written_inputs:
            if not args[i].is_contiguous():
                return self.fn(*args)
        graph = self._graph
        if graph is not None and not torch.is_grad_enabled():
            for a in args:
                if not a.is_contiguous():
                    return self._call_strided(graph, args)
            return graph(args)
        if self.symbolic_dims is not None and not self._symbolic_failed:
            return self._call_symbolic(args)
        plain = [_plain(a) if isinstance(a, torch.Tensor) else a for a in args]
        args.clear()
        return self._call_per_signature(plain)

    def _call_per_signature(self, plain: list):
        key = tuple((a.shape, a.dtype, a.device) if isinstance(a, torch.Tensor) else (type(a), a) for a in plain)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self._compile(key, plain)
        return compiled(plain)

    def _call_symbolic(self, args: list):
        """A symbolic region's call: the first graph whose guard the inputs pass. The first graph compiles at once
        (at the background worker's example call under ``fusion="background"``); for inputs no graph serves, one
        more is compiled on the background worker while the region's own torch operations run, up to
        ``MAX_SYMBOLIC_GRAPHS``, and past that, or if compiling with symbolic sizes fails, the region compiles one
        graph per signature as a region without symbolic sizes does."""
        plain = [_plain(a) if isinstance(a, torch.Tensor) else a for a in args]
        args.clear()
        for graph in self._symbolic:
            if graph.guard(*plain):
                return graph.graph(plain)
        if self._symbolic and not tiers.in_background():
            if self._symbolic_pending:
                return self.fn(*plain)
            if len(self._symbolic) < self.MAX_SYMBOLIC_GRAPHS:
                self._symbolic_pending = True
                examples = inductor_subprocess.example_metadata(plain)
                tiers.submit_compile(lambda: self._compile_symbolic(inductor_subprocess.example_tensors(examples)))
                return self.fn(*plain)
        else:
            graph = self._compile_symbolic(plain)
            if graph is not None and graph.guard(*plain):
                return graph.graph(plain)
        return self._call_per_signature(plain)

    def _compile_symbolic(self, inputs: list) -> symbolic_graphs.SymbolicGraph | None:
        with self._lock:
            try:
                for graph in self._symbolic:
                    if graph.guard(*inputs):
                        return graph  # (another thread compiled it meanwhile)
                if len(self._symbolic) >= self.MAX_SYMBOLIC_GRAPHS or self._symbolic_failed:
                    return None
                graph = self._compiled_by(symbolic_graphs.compile_symbolic_graph, inputs, self.symbolic_dims)
            except Exception:  # noqa: BLE001 - the region falls back to one graph per signature, as before
                self._symbolic_failed = True
                return None
            finally:
                self._symbolic_pending = False
            self._symbolic = (*self._symbolic, graph)
            global _graphs_compiled
            _graphs_compiled += 1
            return graph

    def prepare_compile(self, *args) -> None:
        """Has the compile for ``args`` (as ``__call__`` would compile it: contiguous inputs) done in the compile
        subprocess, which fills Inductor's cache for the compile in this process (``inductor_subprocess``); called by
        the background worker before it compiles."""
        if self.symbolic_dims is None and all(isinstance(a, torch.Tensor) for a in args):
            plain = [_plain(a) for a in args]
            self._warm(inductor_subprocess.example_metadata(plain))

    def _warm(self, examples: list) -> None:
        if self.portable is not None and all(device.type == "cpu" for *_, device in examples):
            inductor_subprocess.warm_cache(
                self.portable, [(tuple(sh), tuple(st), dt, dev.type) for sh, st, dt, dev in examples]
            )

    def _call_strided(self, graph: Callable, args: list):
        """A static region's call with non-contiguous inputs: the graph compiled for their strides if there is one;
        else, while a compile for these strides is queued, the region's own torch operations (see the class
        docstring); past ``MAX_LAYOUTS``, the contiguous graph on copies."""
        strides = tuple(a.stride() for a in args)
        strided = self._layouts.get(strides, False)
        if strided:
            return strided(args)
        if strided is False and len(self._layouts) < self.MAX_LAYOUTS:
            self._layouts[strides] = None
            examples = inductor_subprocess.example_metadata(args)
            tiers.submit_compile(lambda: self._compile_layout(strides, examples), lambda: self._warm(examples))
            strided = None
        if strided is None:
            return self.fn(*args)
        contiguous = [a if a.is_contiguous() else a.contiguous() for a in args]
        args.clear()
        return graph(contiguous)

    def _compile_layout(self, strides: tuple, examples: list) -> None:
        graph = self._inductor_graph(inductor_subprocess.example_tensors(examples))
        self._layouts[strides] = graph
        global _graphs_compiled
        _graphs_compiled += 1

    def _inductor_graph(self, inputs: list) -> Callable:
        """``self.fn`` compiled by Inductor for ``inputs`` (``inductor_subprocess.compile_graph``, the recipe the
        compile subprocess follows too)."""
        return self._compiled_by(inductor_subprocess.compile_graph, inputs)

    def _compiled_by(self, compile_fn: Callable, inputs: list, *options):
        """``compile_fn(self.fn, inputs, *options)`` under the rules of a compile in this process: holding Dynamo's
        compile lock (a ``torch.compile`` in another thread shares process-wide state, see tiers), without
        gradients, leaving the random generators alone on the worker, and without marking the process as tracing."""
        from torch._dynamo.convert_frame import compile_lock as dynamo_compile_lock

        _keep_rng_state_on_the_worker()
        with (
            dynamo_compile_lock,
            torch.no_grad(),
            _other_threads_compiled_functions_unaffected(),
            _other_threads_module_calls_unaffected(),
        ):
            return compile_fn(_without_the_process_wide_tracing_flag(self.fn), inputs, *options)

    def _compile(self, key: tuple, plain: list) -> Callable:
        with self._lock:
            compiled = self.compiled.get(key)
            if compiled is not None:
                return compiled
            if len(self.compiled) >= self.MAX_SIGNATURES:
                if self.dynamic is None:
                    dynamic = torch.compile(self.fn, dynamic=True)
                    self.dynamic = lambda args: dynamic(*args)
                return self.dynamic
            graph_call = self._inductor_graph(plain)
            self.compiled[key] = graph_call
            if self.static:
                self._graph = graph_call
            global _graphs_compiled
            _graphs_compiled += 1
            return graph_call


_graphs_compiled = 0


def _keep_rng_state_on_the_worker() -> None:
    """Makes Inductor leave the process's random number generators alone when it compiles on the background worker.

    Inductor saves the generators' states before it compiles a graph and restores them after
    (``torch._dynamo.utils.preserve_rng_state``), against compile steps that draw. A compile takes seconds; on the
    background worker, the restore rolled back every draw the user's threads made meanwhile, which then drew the
    same numbers again (dropout masks, data) where eager draws new ones. A region never draws (random operations
    stay out of regions, ``_EXCLUDED_TAGS``), so on the worker the save and restore are skipped; elsewhere they
    run as before.
    """
    from torch._dynamo import utils as dynamo_utils

    preserve = dynamo_utils.preserve_rng_state
    if getattr(preserve, "__thunder_worker_guard__", False):
        return

    @contextlib.contextmanager
    def preserve_rng_state_off_the_worker():
        if tiers.in_background():
            yield
        else:
            with preserve():
                yield

    preserve_rng_state_off_the_worker.__thunder_worker_guard__ = True
    dynamo_utils.preserve_rng_state = preserve_rng_state_off_the_worker


def _without_the_process_wide_tracing_flag(fn: Callable) -> Callable:
    """``fn`` for ``make_fx`` to trace without marking the whole process as FX-tracing meanwhile.

    FX's tracer sets a module-level flag for as long as any thread traces, and Dynamo's compiled functions check it on
    every call: a user's ``torch.compile``'d function, called in another thread while the background worker traced a
    region, raised "Detected that you are using FX to symbolically trace a dynamo-optimized function"
    (``benchmarks/vision.py``'s torch.compile of MaxViT beside thunder's fused model). The region's operations are
    recorded by ``make_fx``'s dispatch mode, which is per thread and does not read the flag, so the flag is lowered
    while they run: it is up only while FX's tracer sets itself up and finishes (microseconds, not the trace).
    The traced graph is the same.
    """
    import torch.fx._symbolic_trace as fx_trace

    @functools.wraps(fn)
    def traced(*args):
        was = fx_trace._is_fx_tracing_flag
        fx_trace._is_fx_tracing_flag = False
        try:
            return fn(*args)
        finally:
            fx_trace._is_fx_tracing_flag = was

    return traced


_flag_users = 0
_flag_users_lock = threading.Lock()


@contextlib.contextmanager
def _other_threads_compiled_functions_unaffected():
    """While a region is traced: a ``torch.compile``'d function that another thread calls runs compiled, not raising
    Dynamo's "Detected that you are using FX to symbolically trace a dynamo-optimized function".

    FX's tracer raises its process-wide flag while it sets itself up and finishes (``_without_the_process_wide_
    tracing_flag`` lowers it for the trace itself), and a compiled function checks the flag on every call unless
    Dynamo's ``force_compile_during_fx_trace`` is set. Dynamo's settings are per thread (a ``ContextVar``): only the
    setting's default reaches the user's threads, so the default is raised meanwhile (counted across this process's
    concurrent compiles) and restored after. Where Dynamo's config module differs, nothing changes."""
    global _flag_users
    try:
        import torch._dynamo.config as dynamo_config

        entry = dynamo_config._config["force_compile_during_fx_trace"]
        entry.default  # noqa: B018 (the attribute this relies on)
    except Exception:
        entry = None
    if entry is None:
        yield
        return
    with _flag_users_lock:
        if _flag_users == 0:
            entry._thunder_former_default = entry.default
            entry.default = True
        _flag_users += 1
    try:
        yield
    finally:
        with _flag_users_lock:
            _flag_users -= 1
            if _flag_users == 0:
                entry.default = entry._thunder_former_default


_patching_threads: set[int] = set()  # threads compiling a region: FX's patches of nn.Module apply to them only
_patching_hook_lock = threading.Lock()


@contextlib.contextmanager
def _other_threads_module_calls_unaffected():
    """While a region compiles: a module that another thread calls runs as usual.

    FX's tracers (``make_fx``'s, and Inductor's own while it generates code) replace ``torch.nn.Module.__call__`` and
    ``__getattr__`` process-wide for as long as they trace. A user's module called in another thread meanwhile went
    through the tracer: Inductor's bounds analysis, tracing on the background worker, raised "module is not installed
    as a submodule" in the main thread's call of a thunder-compiled model (``benchmarks/vision.py``, tv_densenet121
    with fusion). The regions never call modules, so for the threads compiling them FX's replacements are made to
    apply in that thread only; other threads' traces are left as they are. Where FX's patcher differs, nothing
    changes."""
    try:
        import torch.fx._symbolic_trace as fx_trace

        patcher = fx_trace._Patcher
        patch_method = patcher.patch_method
    except (ImportError, AttributeError):
        yield
        return
    with _patching_hook_lock:
        if not getattr(patch_method, "__thunder_thread_local__", False):

            @functools.wraps(patch_method)
            def thread_local_for_region_compiles(self, cls, name, new_fn, deduplicate=True):
                tracing_thread = threading.get_ident()
                if cls is torch.nn.Module and tracing_thread in _patching_threads:
                    replaced, fx_fn = getattr(cls, name), new_fn

                    @functools.wraps(fx_fn)
                    def in_the_tracing_thread_only(*args, **kwargs):
                        if threading.get_ident() == tracing_thread:
                            return fx_fn(*args, **kwargs)
                        return replaced(*args, **kwargs)

                    new_fn = in_the_tracing_thread_only
                return patch_method(self, cls, name, new_fn, deduplicate)

            thread_local_for_region_compiles.__thunder_thread_local__ = True
            patcher.patch_method = thread_local_for_region_compiles
    me = threading.get_ident()
    _patching_threads.add(me)
    try:
        yield
    finally:
        _patching_threads.discard(me)


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


def _primitive_operations(bsym: BoundSymbol) -> int:
    """How many computing operations ``bsym`` stands for: 1 for a primitive, the count of its decomposition's
    for a composite (a batch norm is ten or so: Inductor fuses them into one pass where eager's kernel makes
    several over the tensor)."""
    if not bsym.subsymbols:
        return 1
    return max(1, sum(_primitive_operations(s) for s in bsym.subsymbols if _computes(s)))


def _largest_numel(bound_symbols) -> int:
    """The element count of the largest tensor the bound symbols compute. (Not the ones they read: an embedding
    reads its whole table to write a few rows, and a region around it has little to fuse.)"""
    largest = 0
    for bsym in bound_symbols:
        for p in bsym.flat_outs:
            if isinstance(p, TensorProxy):
                largest = max(largest, math.prod(hints(p.shape)))
    return largest


def _symbolic_dims(inputs) -> tuple | None:
    """A region's inputs' symbolic dimensions (``symbolic_graphs.compile_symbolic_graph``'s ``dynamic``), or None
    if its trace has no symbolic size among them (or an input that is neither a tensor nor a number)."""
    dims = []
    for p in inputs:
        if isinstance(p, TensorProxy):
            dims.append(tuple(i for i, n in enumerate(p.shape) if not isinstance(n, int)))
        elif isinstance(p, SizeProxy):
            dims.append(symbolic_graphs.SYMBOLIC_INT)
        elif isinstance(p, NumberProxy):
            dims.append(None)
        else:
            return None
    return tuple(dims) if any(d for d in dims) else None


def _plain(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    return t if t.is_contiguous() else t.contiguous()


def _has_convolution(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` is a convolution or its backward, or holds one in its decomposition."""
    if bsym.sym.name in _CONVOLUTION_BACKWARDS or bsym.sym.name == "convolution":
        return True
    return any(_has_convolution(s) for s in bsym.subsymbols)


def _has_tag(bsym: BoundSymbol, tags: tuple) -> bool:
    """Whether ``bsym`` or any symbol of its decomposition carries one of ``tags``."""
    return any(tag in bsym.sym.tags for tag in tags) or any(_has_tag(s, tags) for s in bsym.subsymbols)


torch_compile_ex = TorchCompileExecutor()
# the compile subprocess starts with a background job, and outlives the worker's work briefly: the fused program's
# first calls queue graphs for the layouts of its regions' inputs
tiers.when_submitted(inductor_subprocess.start)
tiers.when_idle(lambda: inductor_subprocess.close_after(SUBPROCESS_LINGER_S))
