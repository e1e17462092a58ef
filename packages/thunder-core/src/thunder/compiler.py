"""The compile pipeline behind ``thunder.jit``: trace, transform, claim, cache, run.

``CompileData`` holds what the user asked for; ``CompileStats`` what happened (traces of the last
compile, cache hits and misses, per-stage times). A cache entry is a generated prologue that
checks the inputs and calls its computation; a call tries the entries newest first.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch

from thunder.core.trace import TraceCtx, TraceProvenance
from thunder.executors.base import FusionExecutor
from thunder.executors.passes import claim_executors, dce, del_last_used
from thunder.executors.registry import resolve_executors
from thunder.executors.torchex import no_autocast
from thunder.tracing.program import trace_program
from thunder.tracing.prologue import MISS
from thunder.transforms.split import make_autograd_callable, split_forward_backward

__all__ = ["CacheOption", "CompileData", "CompileStats", "CacheEntry", "make_compiled"]


class CacheOption(Enum):
    CONSTANT_VALUES = "constant values"
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


@dataclass
class CompileStats:
    """What happened while compiling and calling a jitted function."""

    cache_hits: int = 0
    cache_misses: int = 0
    last_traces: list[TraceCtx] | None = None
    last_prologue_traces: list[TraceCtx] | None = None
    last_backward_traces: list[TraceCtx] | None = None
    last_interpreter_log: list | None = None
    last_trace_host_start: int = -1
    last_trace_host_stop: int = -1
    # per-stage times of the last compile, in nanoseconds
    last_stage_times_ns: dict[str, int] = field(default_factory=dict)
    last_compile_time_ns: int = 0


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
    cache: list[CacheEntry] = field(default_factory=list)
    stats: CompileStats = field(default_factory=CompileStats)

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


def compile_entry(cd: CompileData, args, kwargs) -> CacheEntry:
    stats = cd.stats
    times: dict[str, int] = {}
    start = time.perf_counter_ns()
    fn = cd.module.forward if cd.module is not None else cd.fn
    record_log = bool(cd.get_compile_option("record_interpreter_log", "record what ran while tracing", True))
    program = trace_program(
        fn,
        args,
        kwargs,
        module=cd.module,
        executors=cd.executors,
        checks=cd.cache_option is not CacheOption.SAME_INPUT,
        record_log=record_log,
    )
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
    for transform in cd.transforms:
        t0 = time.perf_counter_ns()
        trace = transform(trace)
        _stamp(trace, f"{getattr(transform, '__name__', type(transform).__name__)}", t0)
        traces.append(trace)

    t0 = time.perf_counter_ns()
    backward_traces: list[TraceCtx] = []
    if program.requires_grad and program.grad_enabled and not cd.disable_torch_autograd:
        requires_grad = {ti.proxy.name for ti in program.tensor_inputs if ti.proxy.requires_grad}
        fb = split_forward_backward(trace, requires_grad, cd.executors)
        for ex in cd.executors:  # rematerialisation hooks see both traces before claiming
            if isinstance(ex, FusionExecutor):
                fb.forward, fb.backward = ex.rematerialize(fb.forward, fb.backward)
        traces.append(fb.forward)
        traces.extend(_executable_traces(fb.forward, cd.executors))
        backward_traces = [fb.backward, *_executable_traces(fb.backward, cd.executors)]
        times["executors"] = time.perf_counter_ns() - t0
        t0 = time.perf_counter_ns()
        computation = make_autograd_callable(traces[-1].python_callable(), backward_traces[-1].python_callable(), fb)
    else:
        traces.extend(_executable_traces(trace, cd.executors))
        if cd.disable_torch_autograd:
            traces[-1].decorators.append("@torch.no_grad()")
        times["executors"] = time.perf_counter_ns() - t0
        t0 = time.perf_counter_ns()
        computation = traces[-1].python_callable()
    if program.autocast:
        # autocast's casts are in the trace: running under autocast again would cast twice
        computation = no_autocast(computation)
    if program.rebuild_output is not None:
        computation = _with_rebuild(computation, program.rebuild_output)
    call = f"computation({', '.join(ti.expr for ti in program.tensor_inputs)})"
    pstart = time.perf_counter_ns()
    prologue_trace = program.prologue.build(program.signature, call, program.fn_name, computation)
    _stamp(prologue_trace, "Prologue", pstart)
    prologue = prologue_trace.python_callable()
    prologue.__name__ = _short(program.fn_name)
    prologue.__qualname__ = program.fn_name
    times["codegen"] = time.perf_counter_ns() - t0

    stats.last_stage_times_ns = times
    stats.last_compile_time_ns = time.perf_counter_ns() - start
    stats.last_trace_host_start, stats.last_trace_host_stop = start, time.perf_counter_ns()
    return CacheEntry(prologue, prologue_trace, computation, traces, backward_traces, program.log or [])


def _executable_traces(trace: TraceCtx, executors) -> list[TraceCtx]:
    """Claiming, fusion, dead-code elimination and delete-last-used: the traces each pass makes."""
    out = [claim_executors(trace, executors)]
    for ex in executors:
        if isinstance(ex, FusionExecutor):
            out.append(ex.fusion_pass(out[-1]))
    out.append(dce(out[-1]))
    out.append(del_last_used(out[-1]))
    return out


def _short(qualname: str) -> str:
    return qualname.rsplit(".", 1)[-1]


def _with_rebuild(computation, rebuild):
    def computation_with_output_structure(*args):
        return rebuild(computation(*args))

    return computation_with_output_structure


def make_compiled(cd: CompileData) -> Callable:
    """The function that runs a jitted program: try the cached prologues, else compile."""
    entries = cd.cache
    stats = cd.stats
    no_caching = cd.cache_option is CacheOption.NO_CACHING

    def _miss(args, kwargs):
        stats.cache_misses += 1
        entry = compile_entry(cd, args, kwargs)
        if not no_caching:
            entries.insert(0, entry)
        _note_last(entry)
        result = entry.prologue(*args, **kwargs)
        if result is MISS:
            raise RuntimeError(
                "internal error: the inputs thunder just traced do not pass the checks generated for them; "
                f"the prologue was:\n{entry.prologue_trace}"
            )
        return result

    def _note_last(entry: CacheEntry) -> None:
        stats.last_traces = entry.computation_traces
        stats.last_prologue_traces = [entry.prologue_trace]
        stats.last_backward_traces = entry.backward_traces
        stats.last_interpreter_log = entry.interpreter_log

    def thunder_compiled(*args, **kwargs):
        for entry in entries:
            result = entry.prologue(*args, **kwargs)
            if result is not MISS:
                stats.cache_hits += 1
                if stats.last_traces is not entry.computation_traces:
                    _note_last(entry)
                return result
        return _miss(args, kwargs)

    thunder_compiled._lc_cd = cd
    return thunder_compiled


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
    return CompileData(
        fn=fn,
        module=module,
        executors=resolve_executors(executors),
        cache_option=resolve_cache_option(cache),
        transforms=list(transforms or []),
        disable_torch_autograd=disable_torch_autograd,
        compile_options=dict(compile_options),
    )
