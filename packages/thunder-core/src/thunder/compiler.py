"""The compile pipeline behind ``thunder.jit``: trace, transform, claim, cache, run.

``CompileData`` holds what the user asked for; ``CompileStats`` what happened (traces of the last
compile, cache hits and misses, per-stage times). A cache entry is a generated prologue that
checks the inputs and calls its computation; a call tries the entry that answered last, then the
entries whose cheap key (shapes, dtypes, scalar values) matches. At most ``cache_size_limit``
entries are kept (least recently used dropped first), and a function that keeps recompiling warns,
naming the input that varies.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from thunder.core.trace import TraceCtx, TraceProvenance
from thunder.entry_point import make_entry_point
from thunder.executors import inductor_subprocess, tiers
from thunder.executors.base import FusionExecutor
from thunder.executors.buffer_reuse import reuse_dead_buffers
from thunder.executors.host_memory import settle_host_allocator
from thunder.executors.passes import claim_executors, dce, del_last_used
from thunder.executors.registry import resolve_executors
from thunder.executors.state_updates import update_state_in_place
from thunder.executors.torchex import no_autocast
from thunder.module import check_jittable_module
from thunder.tracing.program import trace_program
from thunder.tracing.prologue import MISS, size_local
from thunder.tracing.version_counters import versions_after, versions_before
from thunder.transforms.conv_layout import channels_last_convolutions
from thunder.transforms.split import make_autograd_callable, split_forward_backward

__all__ = ["CacheOption", "CompileData", "CompileStats", "CacheEntry", "make_compiled"]


class CacheOption(Enum):
    """What a compiled program specialises on.

    - ``"constant values"`` (the default): numbers and sizes are constants of the program; an argument dimension
      whose size changed between two compiles becomes symbolic from then on (so a decode loop or variable-length
      batches compile a couple of programs, not one per length);
    - ``"symbolic values"``: every argument dimension of size 2 or more is symbolic from the first compile;
      the program is reused for any sizes that satisfy the relations it relied on (``s0 > 1``, ``s1 == s0``);
    - ``"same input"``: no checks (the caller promises the inputs always match);
    - ``"no caching"``: every call compiles.
    """

    CONSTANT_VALUES = "constant values"
    SYMBOLIC_VALUES = "symbolic values"
    SAME_INPUT = "same input"
    NO_CACHING = "no caching"


def resolve_cache_option(cache) -> CacheOption:
    if isinstance(cache, CacheOption):
        return cache
    for option in CacheOption:
        if cache == option.value:
            return option
    choices = ", ".join(repr(o.value) for o in CacheOption)
    raise ValueError(f"unknown cache option {cache!r} for thunder.jit(cache=...); choose one of {choices}")


@dataclass
class CacheEntry:
    prologue: Callable
    prologue_trace: TraceCtx
    computation: Callable
    computation_traces: list[TraceCtx]
    backward_traces: list[TraceCtx] = field(default_factory=list)
    interpreter_log: list = field(default_factory=list)
    builder: Any = None  # the PrologueBuilder, for describing a failed check
    run_unchecked: Callable | None = None  # the prologue without checks (for the call that traced)
    fusion: str = tiers.NOT_TIERED  # whether the fused program of a tiered compile runs (thunder.executors.tiers)
    held_fusion_job: tiers.FusionJob | None = None  # a fusion job waiting for the first call to finish


@dataclass
class CompileStats:
    """What happened while compiling and calling a jitted function."""

    # the calls a cached program answered: the prologues count them (``_hits[0] += 1`` once their checks pass)
    hit_counter: list[int] = field(default_factory=lambda: [0], repr=False)
    cache_misses: int = 0
    last_traces: list[TraceCtx] | None = None
    last_prologue_traces: list[TraceCtx] | None = None
    last_backward_traces: list[TraceCtx] | None = None
    last_interpreter_log: list | None = None  # as the tracer logs it; thunder.last_interpreter_log gives records
    last_trace_host_start: int = -1
    last_trace_host_stop: int = -1
    # per-stage times of the last compile, in nanoseconds
    last_stage_times_ns: dict[str, int] = field(default_factory=dict)
    last_compile_time_ns: int = 0
    # tiered compilation (thunder.executors.tiers): fused programs swapped in, and background compiles that failed
    background_fusions: int = 0
    background_fusion_failures: int = 0

    @property
    def cache_hits(self) -> int:
        """How many calls a cached program answered."""
        return self.hit_counter[0]

    @cache_hits.setter
    def cache_hits(self, value: int) -> None:
        self.hit_counter[0] = value


@dataclass
class CompileData:
    """What ``thunder.jit`` was asked to compile, and how."""

    fn: Callable
    module: torch.nn.Module | None
    executors: tuple
    cache_option: CacheOption
    transforms: list
    disable_torch_autograd: bool
    compile_options: dict[str, Any]
    # options read by the compiler, executors or transforms, with what each one does
    used_compile_options: dict[str, str] = field(default_factory=dict)
    cache: Any = field(default_factory=list)  # an EntryCache once make_compiled has run
    stats: CompileStats = field(default_factory=CompileStats)
    # automatic dynamic sizes: each argument tensor's sizes at the last compile, and the dimensions seen to vary
    size_history: dict[str, tuple] = field(default_factory=dict)
    dynamic_dims: dict[str, frozenset] = field(default_factory=dict)
    symbolic_failed: bool = False  # tracing with symbolic sizes failed once: trace with numbers only
    fusion_jobs: list = field(default_factory=list)  # background fusion not known to be finished
    fusion_warned: bool = False

    @property
    def executors_list(self) -> tuple:
        return self.executors

    def get_compile_option(self, name: str, description: str, default=None):
        """Reads an option passed to ``thunder.jit(**compile_options)``, noting that it was used."""
        self.used_compile_options[name] = description
        return self.compile_options.get(name, default)


def _stamp(trace: TraceCtx, name: str, start_ns: int) -> TraceCtx:
    trace.set_provenance(TraceProvenance(name, (time.perf_counter_ns() - start_ns) / 1e6))
    return trace


@contextlib.contextmanager
def _gc_paused():
    """Python's cyclic garbage collector paused while a program compiles: compiling allocates many
    short-lived objects, and the collections they trigger cost about a tenth of the compile time.
    The garbage is collected as usual afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def compile_entry(cd: CompileData, args, kwargs) -> CacheEntry:
    settle_host_allocator()  # (once per process: glibc's thresholds, see executors/host_memory.py)
    stats = cd.stats
    times: dict[str, int] = {}
    start = time.perf_counter_ns()
    fn = cd.module.forward if cd.module is not None else cd.fn
    record_log = bool(cd.get_compile_option("record_interpreter_log", "record what ran while tracing", True))
    program = _trace_with_sizes(cd, fn, args, kwargs, record_log)
    times["tracing"] = time.perf_counter_ns() - start
    traces = [_stamp(program.computation, "Tracing", start)]

    trace = program.computation
    for ex in cd.executors:
        t0 = time.perf_counter_ns()
        rewritten = ex.rewrite_trace(trace)
        if rewritten is not trace:
            trace = rewritten
            _stamp(trace, f"Rewritten by the {ex.name} executor", t0)
            traces.append(trace)
    fusing = any(isinstance(ex, FusionExecutor) for ex in cd.executors)
    laid_out = channels_last_convolutions(trace, _conv_layout(cd), fusing)
    if laid_out is not trace:
        trace = laid_out
        traces.append(trace)
    for transform in cd.transforms:
        t0 = time.perf_counter_ns()
        trace = transform(trace)
        _stamp(trace, f"{getattr(transform, '__name__', type(transform).__name__)}", t0)
        traces.append(trace)

    slow = _slow_fusion_executors(cd)
    first_tier = tuple(ex for ex in cd.executors if ex not in slow) if slow else cd.executors
    trains = program.requires_grad and program.grad_enabled and not cd.disable_torch_autograd
    requires_grad = {ti.proxy.name for ti in program.tensor_inputs if ti.proxy.requires_grad} if trains else None
    prefix = list(traces)
    executable = _executable_program(cd, trace, requires_grad, program.autocast, first_tier)
    times["executors"], t0 = executable.claim_ns, executable.codegen_start_ns
    traces.extend(executable.traces)
    computation = executable.computation
    call_args = [ti.expr for ti in program.tensor_inputs] + [size_local(p) for p in program.size_inputs]
    call = f"computation({', '.join(call_args)})"
    if program.version_bumps:
        # the arguments an update reached leave the computation with the versions eager gives them, before the
        # step after the call views them or changes their layouts (version_counters.py)
        constants = program.prologue.trace.constants
        constants["_versions_before"], constants["_versions_after"] = versions_before, versions_after
        updated = "".join(f"{expr}, " for expr, _, _ in program.version_bumps)
        bumps = "".join(f"{n}, " for _, n, _ in program.version_bumps)
        early = "".join(f"{early}, " for _, _, early in program.version_bumps)
        call = f"_versions_after(_versions_before(({updated}), ({bumps}), ({early})), {call}, ({updated}), ({bumps}))"
    if program.rebuild_output is not None:
        # the output's structure is rebuilt (and object arguments updated) from the computation's flat output
        program.prologue.trace.constants["_finish"] = program.rebuild_output
        call = f"_finish({', '.join([call, *program.rebuild_args])})"
    pstart = time.perf_counter_ns()
    prologue_trace = program.prologue.build(
        program.signature, call, program.fn_name, computation, hit_counter=stats.hit_counter
    )
    _stamp(prologue_trace, "Prologue", pstart)
    prologue = program.prologue.python_callable(prologue_trace)
    prologue.__name__ = _short(program.fn_name)
    prologue.__qualname__ = program.fn_name
    times["codegen"] = time.perf_counter_ns() - t0

    stats.last_stage_times_ns = times
    stats.last_compile_time_ns = time.perf_counter_ns() - start
    stats.last_trace_host_start, stats.last_trace_host_stop = start, time.perf_counter_ns()
    run_unchecked = program.prologue.build_unchecked() if program.side_effects else None
    entry = CacheEntry(
        prologue,
        prologue_trace,
        computation,
        traces,
        executable.backward_traces,
        program.log or [],
        program.prologue,
        run_unchecked,
    )
    if slow:

        def build() -> _Executable:
            fused = _executable_program(cd, trace, requires_grad, program.autocast, cd.executors)
            # the backwards the unfused program ran (for the outputs that received a gradient) are built now and
            # their regions compile with the forward's, so the fused program's first backward compiles nothing;
            # the full backward's compile too unless only others ran (a model output that nobody differentiates)
            ran = set(executable.backwards_run)
            for absent in ran - {_ALL_OUTPUTS}:
                fused.build_backward(absent)
            full = fused.backward_traces[-1:] if not ran or _ALL_OUTPUTS in ran else []
            fused.backwards_to_compile = [*full, *(t for t in fused.pruned_backwards.values() if t is not None)]
            return fused

        _start_fusion_tier(cd, entry, build, prefix, set(slow))
    return entry


@dataclass
class _Executable:
    """A program's runnable form for one executor list: the callable and the traces that made it."""

    computation: Callable
    traces: list[TraceCtx]  # claiming, fusion, dce, delete-last-used (after the forward trace when training)
    backward_traces: list[TraceCtx]
    claim_ns: int = 0
    codegen_start_ns: int = 0
    # training: the backward for calls whose outputs at the positions ``absent`` receive no gradient
    # (``build_backward(absent)``, made once per set), and the final traces of those made so far
    build_backward: Callable[[frozenset], Callable | None] | None = None
    pruned_backwards: dict[frozenset, TraceCtx | None] = field(default_factory=dict)
    # the backwards that ran, by their ``absent`` sets (the full backward's is empty)
    backwards_run: set[frozenset] = field(default_factory=set)
    # the backward traces whose fusion regions the background fusion compiles with the forward's (set by its build)
    backwards_to_compile: list[TraceCtx] = field(default_factory=list)


def _executable_program(
    cd: CompileData, trace: TraceCtx, requires_grad: set[str] | None, autocast: bool, executors
) -> _Executable:
    """Splits ``trace`` into forward and backward when it trains (``requires_grad``: the names of the inputs
    that require grad), claims it with ``executors`` and compiles the result to the computation callable
    the prologue calls."""
    t0 = time.perf_counter_ns()
    traces: list[TraceCtx] = []
    backward_traces: list[TraceCtx] = []
    if requires_grad is not None:
        fb = split_forward_backward(trace, requires_grad, executors, recompute=_recompute_mode(cd))
        for ex in executors:  # rematerialisation hooks see both traces before claiming
            if isinstance(ex, FusionExecutor):
                fb.forward, fb.backward = ex.rematerialize(fb.forward, fb.backward)
        traces.append(fb.forward)
        traces.extend(_executable_traces(fb.forward, executors))
        backward_traces = [fb.backward, *_executable_traces(fb.backward, executors)]
        claim_ns = time.perf_counter_ns() - t0
        t0 = time.perf_counter_ns()

        pruned_traces: dict[frozenset, TraceCtx | None] = {}
        pruned_callables: dict[frozenset, Callable | None] = {}
        backwards_run: set[frozenset] = set()
        # compiled at its first use (a call whose outputs all get gradients; others run a pruned backward). Python
        # code of a finished trace: no compile lock (a background compile may hold it for seconds), and two threads
        # racing here compile it twice, harmlessly
        full: list[Callable] = []

        def full_backward(saved, cotangents):
            backwards_run.add(_ALL_OUTPUTS)
            if not full:
                with _gc_paused():
                    full.append(backward_traces[-1].python_callable())
            return full[0](saved, cotangents)

        def build_backward(absent: frozenset) -> Callable | None:
            backwards_run.add(absent)
            with _compile_lock, _gc_paused():
                if absent not in pruned_callables:
                    pruned = fb.prune(absent)
                    final = None if pruned is None else _executable_traces(pruned, executors)[-1]
                    pruned_callables[absent] = None if final is None else final.python_callable()
                    pruned_traces[absent] = final
                return pruned_callables[absent]

        computation = make_autograd_callable(traces[-1].python_callable(), full_backward, fb, build_backward)
    else:
        build_backward, pruned_traces, backwards_run = None, {}, set()
        traces.extend(_executable_traces(trace, executors))
        if cd.disable_torch_autograd:
            traces[-1].decorators.append("@torch.no_grad()")
        claim_ns = time.perf_counter_ns() - t0
        t0 = time.perf_counter_ns()
        computation = traces[-1].python_callable()
    if autocast:
        # autocast's casts are in the trace: running under autocast again would cast twice
        computation = no_autocast(computation)
    return _Executable(computation, traces, backward_traces, claim_ns, t0, build_backward, pruned_traces, backwards_run)


_ALL_OUTPUTS = frozenset()  # (the ``absent`` set of the full backward: every output receives a gradient)


def _conv_layout(cd: CompileData) -> str:
    return cd.get_compile_option(
        "conv_layout",
        "the memory format of convolution chains: 'auto' (the default: with a fusion executor, channels-last on the "
        "CPU for networks with grouped convolutions, whose kernels are faster in it; thunder/transforms/"
        "conv_layout.py), 'channels_last' (any network with 2-D convolutions) or 'as_given' (the inputs' own)",
        "auto",
    )  # (channels_last_convolutions checks the value, naming conv_layout=)


def _recompute_mode(cd: CompileData) -> str:
    return cd.get_compile_option(
        "recompute",
        "which forward values the backward recomputes instead of keeping them from the forward: 'elementwise' (the "
        "default: elementwise results, casts and reshapes of saved values; lower peak memory, one more kernel per "
        "value where no fusion executor fuses it) or 'reshapes' (views and reshapes only: eager autograd's kernels "
        "and memory)",
        "elementwise",
    )  # (split_forward_backward checks the value, naming recompute=)


def _fusion_mode(cd: CompileData) -> str:
    mode = cd.get_compile_option(
        "fusion",
        "when fusion executors that compile slowly (torch_compile) compile: 'background' (the default: the first "
        "calls run the unfused program while the fused one compiles on a background thread), 'wait' (the first call "
        "compiles the fused program before it returns), 'off' (no tiers: regions compile when they first run)",
        "background",
    )
    if mode not in tiers.FUSION_MODES:
        choices = ", ".join(map(repr, tiers.FUSION_MODES))
        raise ValueError(f"thunder.jit(fusion={mode!r}): unknown fusion mode; choose one of {choices}")
    return mode


def _slow_fusion_executors(cd: CompileData) -> tuple:
    """The fusion executors whose regions compile in the background (``fusion="background"`` or ``"wait"``)."""
    if _fusion_mode(cd) == "off":
        return ()
    return tuple(ex for ex in cd.executors if isinstance(ex, FusionExecutor) and ex.compiles_slowly)


def _start_fusion_tier(
    cd: CompileData,
    entry: CacheEntry,
    build: Callable[[], _Executable],
    prefix: list[TraceCtx],
    slow: set,
) -> None:
    """Compiles ``entry``'s fused program (``build()``) in the background, or now under ``fusion="wait"``, and
    swaps it in. ``prefix``: the entry's traces before claiming; ``slow``: the executors whose regions to
    compile."""
    entry.fusion = tiers.UNFUSED

    def regions(executable: _Executable) -> list:
        final = [executable.traces[-1], *executable.backwards_to_compile]
        return [call for t in final for call in tiers.region_calls(t, slow.__contains__)]

    def install(executable: _Executable) -> None:
        entry.computation_traces = [*prefix, *executable.traces]
        entry.backward_traces = executable.backward_traces
        entry.computation = executable.computation
        entry.prologue.__globals__["computation"] = executable.computation  # the swap: one assignment
        entry.fusion = tiers.FUSED
        if isinstance(cd.cache, EntryCache):  # the next call notes the fused program's traces
            cd.cache.invalidate_fast_path(entry)
        cd.stats.background_fusions += 1

    def fail(error: BaseException) -> None:
        entry.fusion = tiers.FAILED
        cd.stats.background_fusion_failures += 1
        if not cd.fusion_warned:
            cd.fusion_warned = True
            name = getattr(cd.fn, "__qualname__", None) or type(cd.fn).__name__
            warnings.warn(
                f"thunder.jit: compiling the fused program of {name} failed ({type(error).__name__}: {error}); "
                "it keeps running its unfused program",
                stacklevel=2,
            )

    job = tiers.FusionJob(build, regions, install, fail, _compile_lock)
    cd.fusion_jobs.append(job)
    if _fusion_mode(cd) == "wait":
        job.release()
        job.run()
    else:
        entry.held_fusion_job = job  # released when the call that compiled it is done (_release_after_first_call)
        tiers.submit(job)


# a job held for the first call's backward starts at the latest this long after the forward returned, or three
# times the forward's duration if that is longer (a forward whose backward never comes)
_FUSION_HOLD_S = 1.0


def _release_after_first_call(entry: CacheEntry, result, call_seconds: float) -> None:
    """Lets the worker start ``entry``'s fusion job: now, or, when ``result`` (the first call's) carries thunder's
    backward, once that backward has run: the first step then runs without the worker competing with it."""
    job, entry.held_fusion_job = entry.held_fusion_job, None
    node = None
    for leaf in tree_leaves(result):
        if isinstance(leaf, torch.Tensor) and leaf.grad_fn is not None:
            node = leaf.grad_fn
            if node.name() == "ThunderFunctionBackward":
                break
    if node is None:
        job.release()
        return
    job.hold_until(time.monotonic() + max(_FUSION_HOLD_S, 3 * call_seconds))
    if node.name() == "ThunderFunctionBackward":
        node.register_hook(lambda grad_inputs, grad_outputs: job.release())


def wait_for_fusion(cd: CompileData, timeout: float | None = None) -> bool:
    """Waits until the background fusion of ``cd``'s programs has finished; ``False`` if ``timeout`` ran out."""
    with inductor_subprocess.prioritized():  # (the caller waits: the compile subprocess may take the cores)
        return _wait_for_fusion(cd, timeout)


def _wait_for_fusion(cd: CompileData, timeout: float | None) -> bool:
    deadline = None if timeout is None else time.monotonic() + timeout
    for job in list(cd.fusion_jobs):
        job.release()
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not job.done.wait(remaining):
            return False
    cd.fusion_jobs[:] = [job for job in cd.fusion_jobs if not job.done.is_set()]
    # (and the compiles fused regions queued for the input layouts they met: torch_compile's _InductorRegion)
    return tiers.wait_for_compiles(deadline)


def _dynamic_policy(cd: CompileData):
    """Which dimensions of an argument tensor to trace as symbols (None: none, the policy is off)."""
    option = cd.cache_option
    dynamic = cd.get_compile_option(
        "dynamic",
        "symbolic sizes: True traces every argument dimension symbolically from the first call (as cache='symbolic "
        "values'), False never; by default a dimension becomes symbolic once a call changed its size",
        None,
    )
    if option is CacheOption.SYMBOLIC_VALUES or (dynamic is True and option is CacheOption.CONSTANT_VALUES):
        return lambda expr, t: range(t.ndim)
    if option is not CacheOption.CONSTANT_VALUES or not cd.size_history or dynamic is False:
        return None
    history, seen_varying = cd.size_history, cd.dynamic_dims

    def varying(expr: str, t: torch.Tensor):
        return sorted(seen_varying.get(expr, frozenset()) | _changed_dims(history.get(expr), t.shape))

    return varying


def _changed_dims(before: tuple | None, shape) -> set[int]:
    """The dimensions whose size differs from ``before`` (none when there is no ``before`` of that rank)."""
    if before is None or len(before) != len(shape):
        return set()
    return {d for d, (a, b) in enumerate(zip(before, shape)) if a != b}


def _trace_with_sizes(cd: CompileData, fn, args, kwargs, record_log: bool):
    """Traces with the dimensions the cache option makes symbolic; with numbers only if that fails."""
    checks = cd.cache_option is not CacheOption.SAME_INPUT
    dynamic = None if cd.symbolic_failed else _dynamic_policy(cd)
    trace = functools.partial(
        trace_program, fn, args, kwargs, module=cd.module, executors=cd.executors, checks=checks, record_log=record_log
    )
    program = failure = None
    if dynamic is not None:
        try:
            program = trace(dynamic=dynamic)
        except Exception as e:  # noqa: BLE001 - the user's error, or a limitation of symbolic tracing: see below
            if os.environ.get("THUNDER_DEBUG_SYMBOLIC"):
                raise
            failure = e
    if program is None:
        # (an error of the user's code is raised again here, as eager raises it)
        program = trace()
    if failure is not None:  # symbolic sizes failed where numbers work: numbers from now on
        cd.symbolic_failed = True
        if cd.cache_option is CacheOption.SYMBOLIC_VALUES:
            detail = str(failure).splitlines()[0] if str(failure) else ""
            warnings.warn(
                f"thunder.jit(cache='symbolic values'): tracing with symbolic sizes failed ({type(failure).__name__}: "
                f"{detail}); this function's sizes are traced as numbers",
                stacklevel=5,
            )
    if cd.cache_option is CacheOption.CONSTANT_VALUES:
        for ti in program.tensor_inputs:
            if ti.example is not None and not ti.is_module_state:
                changed = _changed_dims(cd.size_history.get(ti.expr), ti.example.shape)
                if changed:
                    cd.dynamic_dims[ti.expr] = cd.dynamic_dims.get(ti.expr, frozenset()) | changed
                cd.size_history[ti.expr] = tuple(ti.example.shape)
    return program


def _executable_traces(trace: TraceCtx, executors) -> list[TraceCtx]:
    """Claiming, fusion, in-place state updates and buffer reuse, dead-code elimination, delete-last-used: each pass's trace."""
    out = [claim_executors(trace, executors)]
    for ex in executors:
        if isinstance(ex, FusionExecutor):
            out.append(ex.fusion_pass(out[-1]))
    out.append(update_state_in_place(out[-1]))
    out.append(reuse_dead_buffers(out[-1]))
    out.append(dce(out[-1]))
    out.append(del_last_used(out[-1]))
    return out


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


# Tracing uses process-wide state (the current trace, torch's "compiling" flag): one compile at a time; a
# tracing thread goes before the background fusion worker (tiers.CompileLock).
_compile_lock = tiers.compile_lock

_DEFAULT_CACHE_SIZE_LIMIT = 64
_DEFAULT_RECOMPILE_LIMIT = 8


def _call_key(args, kwargs):
    """A cheap key the prologue's checks refine: tensor shapes and dtypes, scalar values, other types."""
    return tuple(map(_arg_key, args)) + (tuple((k, _arg_key(v)) for k, v in kwargs.items()) if kwargs else ())


def _arg_key(a):
    t = type(a)
    if t is torch.Tensor or t is torch.nn.Parameter:
        return (a.shape, a.dtype)
    if t is int or t is float or t is bool or t is str or a is None:
        return a  # (0.0 and -0.0 share a key; their prologues tell them apart)
    return t


_UNTRIED: Any = object()


def _no_entry(*args, **kwargs):
    """The fast path's prologue while no entry answered last: every call takes the slow path."""
    return MISS


class EntryCache:
    """A function's cache entries, least recently used first, at most ``limit`` of them.

    A call tries the entry that answered last (one prologue for the common case: ``fast[0]`` is its prologue),
    then the entries whose key (``_call_key``: shapes, dtypes, scalar values) matches, then the rest.
    """

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self._entries: OrderedDict[int, CacheEntry] = OrderedDict()
        self._buckets: dict[Any, list[CacheEntry]] = {}
        self._keys: dict[int, Any] = {}
        self.mru: CacheEntry | None = None
        # the prologue the jitted callable calls first: the most recently used entry's, or _no_entry when
        # the next call must go through lookup (no entry yet, or the entry's program was swapped)
        self.fast: list[Callable] = [_no_entry]
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self):
        return iter(reversed(list(self._entries.values())))

    def __getitem__(self, i: int) -> CacheEntry:
        return list(self)[i]

    def clear(self) -> None:
        self._entries.clear()
        self._buckets.clear()
        self._keys.clear()
        self.mru = None
        self.fast[0] = _no_entry

    def add(self, entry: CacheEntry, key) -> None:
        self._entries[id(entry)] = entry
        self._keys[id(entry)] = key
        try:
            self._buckets.setdefault(key, []).insert(0, entry)
        except TypeError:  # an unhashable key: found by the full scan only
            self._keys[id(entry)] = None
        self._set_mru(entry)
        while self.limit is not None and len(self._entries) > self.limit:
            _, old = self._entries.popitem(last=False)
            self._forget(old)
            self.evictions += 1

    def _forget(self, entry: CacheEntry) -> None:
        key = self._keys.pop(id(entry), None)
        bucket = self._buckets.get(key) if key is not None else None
        if bucket is not None:
            bucket[:] = [e for e in bucket if e is not entry]
            if not bucket:
                del self._buckets[key]
        if self.mru is entry:
            self.mru = None
            self.fast[0] = _no_entry

    def _set_mru(self, entry: CacheEntry) -> None:
        self.mru = entry
        self.fast[0] = entry.prologue

    def invalidate_fast_path(self, entry: CacheEntry) -> None:
        """The next call goes through ``lookup`` (which notes the entry's new traces) if ``entry`` answered last."""
        if self.mru is entry:
            self.fast[0] = _no_entry

    def lookup(self, args, kwargs, tried: CacheEntry | None = _UNTRIED):
        """``(entry, result)`` of the first entry whose prologue accepts the inputs, else ``(None, MISS)``.

        ``tried`` is an entry the caller already tried (the most recently used one).
        """
        mru = self.mru
        if tried is _UNTRIED:
            if mru is not None:
                result = mru.prologue(*args, **kwargs)
                if result is not MISS:
                    self._set_mru(mru)
                    return mru, result
        else:
            mru = tried
        if len(self._entries) <= 1 and (mru is None or id(mru) in self._entries):
            return None, MISS
        key = _call_key(args, kwargs)
        try:
            bucket = self._buckets.get(key, ())
        except TypeError:
            bucket = ()
        tried = {id(mru)}
        for entry in tuple(bucket):
            tried.add(id(entry))
            result = entry.prologue(*args, **kwargs)
            if result is not MISS:
                self._touch(entry)
                return entry, result
        for entry in list(reversed(self._entries.values())):
            if id(entry) in tried:
                continue
            result = entry.prologue(*args, **kwargs)
            if result is not MISS:
                self._touch(entry)
                return entry, result
        return None, MISS

    def _touch(self, entry: CacheEntry) -> None:
        if id(entry) in self._entries:
            self._entries.move_to_end(id(entry))
        self._set_mru(entry)


def make_compiled(cd: CompileData) -> Callable:
    """The function that runs a jitted program: try the cached prologues, else compile.

    The common call costs one extra frame: the jitted callable (with the function's signature, see
    ``thunder.entry_point``) calls the prologue that answered last (``EntryCache.fast``), which counts the
    cache hit itself.
    """
    stats = cd.stats
    no_caching = cd.cache_option is CacheOption.NO_CACHING
    limit = cd.get_compile_option(
        "cache_size_limit",
        "at most this many compiled programs are kept per function (least recently used dropped first)",
        _DEFAULT_CACHE_SIZE_LIMIT,
    )
    recompile_limit = cd.get_compile_option(
        "recompile_limit",
        "warn, naming the input that varies, when a function has compiled more than this many programs",
        _DEFAULT_RECOMPILE_LIMIT,
    )
    entries = cd.cache = EntryCache(limit)
    lock = threading.RLock()
    warned = [False]
    hits = stats.hit_counter

    def _miss(args, kwargs):
        with lock, _compile_lock:
            if not no_caching:  # another thread may have compiled it meanwhile
                entry, result = entries.lookup(args, kwargs)
                if entry is not None:
                    _note_last(entry)
                    return entry, result
            previous = entries.mru
            stats.cache_misses += 1
            if (
                recompile_limit is not None
                and not warned[0]
                and not no_caching
                and stats.cache_misses > recompile_limit
                and previous is not None
            ):
                warned[0] = True
                _warn_recompiling(cd, previous, args, kwargs, recompile_limit)
            with _gc_paused():
                entry = compile_entry(cd, args, kwargs)
            if not no_caching:
                entries.add(entry, _safe_key(args, kwargs))
            _note_last(entry)
        if entry.held_fusion_job is None:
            return entry, _run_new_entry(entry, args, kwargs)
        start = time.perf_counter()
        result = None
        try:
            result = _run_new_entry(entry, args, kwargs)
        finally:
            _release_after_first_call(entry, result, time.perf_counter() - start)
        return entry, result

    def _run_new_entry(entry: CacheEntry, args, kwargs):
        result = entry.prologue(*args, **kwargs)
        if result is not MISS:
            hits[0] -= 1  # (the prologue counted this call, which compiled: a miss)
        else:
            if entry.run_unchecked is None and _changed_by_the_call(entry, args, kwargs):
                entry.run_unchecked = entry.builder.build_unchecked()
            if entry.run_unchecked is None:
                raise RuntimeError(
                    "internal error: the inputs thunder just traced do not pass the checks generated for them; "
                    f"the prologue was:\n{entry.prologue_trace}"
                )
            # tracing ran the call's Python side effects (a flag set, a counter bumped): this call's
            # program is the one just traced; the entry's checks describe the state before the call
            result = entry.run_unchecked(*args, **kwargs)
        return result

    def _note_last(entry: CacheEntry) -> None:
        stats.last_traces = entry.computation_traces
        stats.last_prologue_traces = [entry.prologue_trace]
        stats.last_backward_traces = entry.backward_traces
        stats.last_interpreter_log = entry.interpreter_log

    def _slow_path(prologue, args, kwargs):
        """The entry that answered last rejected the call (``prologue``: the one tried): the other entries, else
        compile."""
        mru = entries.mru
        tried = mru if mru is not None and mru.prologue is prologue else _UNTRIED
        entry, result = entries.lookup(args, kwargs, tried=tried)
        if entry is None:
            return _miss(args, kwargs)[1]
        if stats.last_traces is not entry.computation_traces:
            _note_last(entry)
        return result

    target = cd.module.forward if cd.module is not None else cd.fn
    name = getattr(target, "__qualname__", None) or type(target).__name__
    thunder_compiled = make_entry_point(target, name, entries.fast, _slow_path, MISS)
    thunder_compiled._lc_cd = cd
    return thunder_compiled


def _changed_by_the_call(entry: CacheEntry, args, kwargs) -> bool:
    """Whether the check that failed right after tracing is on a Python value (a global list appended to,
    a dict entry bumped) that the traced call itself changed, rather than on the tensors."""
    if entry.builder is None:
        return False
    what = entry.builder.first_failing_check(*args, **kwargs)
    return what is not None and not what.startswith(("the tensor", "_is_grad_enabled"))


def _safe_key(args, kwargs):
    try:
        key = _call_key(args, kwargs)
        hash(key)
        return key
    except Exception:
        return None


def _warn_recompiling(cd: CompileData, previous: CacheEntry, args, kwargs, limit: int) -> None:
    what = None
    if previous.builder is not None:
        what = previous.builder.first_failing_check(*args, **kwargs)
    name = getattr(cd.fn, "__qualname__", None) or type(cd.fn).__name__
    cause = f"the last recompilation was caused by a change of {what}" if what else "the cause could not be determined"
    warnings.warn(
        f"thunder.jit: {name} has been compiled {cd.stats.cache_misses} times (more than recompile_limit={limit}); "
        f"{cause}. Each new value of an input the program specialises on (a shape, a Python number, a module "
        "attribute, a global) compiles a new program; keep it fixed, pass it as a tensor, or raise the limit "
        "with thunder.jit(..., recompile_limit=N). At most cache_size_limit programs are kept.",
        stacklevel=4,
    )


def build_compile_data(
    fn,
    *,
    executors: Sequence | None,
    cache,
    transforms,
    disable_torch_autograd: bool,
    compile_options: dict,
) -> CompileData:
    module = fn if isinstance(fn, torch.nn.Module) else None
    if module is None and not callable(fn):
        raise TypeError(f"thunder.jit expects a function or a torch.nn.Module, got {type(fn).__name__}")
    if module is not None:
        check_jittable_module(module)
    return CompileData(
        fn=fn,
        module=module,
        executors=resolve_executors(executors),
        cache_option=resolve_cache_option(cache),
        transforms=list(transforms or []),
        disable_torch_autograd=disable_torch_autograd,
        compile_options=dict(compile_options),
    )
