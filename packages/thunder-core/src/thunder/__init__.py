"""Thunder: a source-to-source compiler for PyTorch.

``thunder.jit`` traces a function or module into a readable straight-line Python program (a
trace), transforms it, lets executors claim its operations, and runs the result.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunder import extend  # noqa: F401  (registers the built-in executors)
from thunder import torch as torch_language  # noqa: F401
from thunder.compiler import CacheOption, CompileData, CompileStats, build_compile_data, make_compiled
from thunder.core import devices, dtypes  # noqa: F401
from thunder.core.aliasing_record import AliasingRecord
from thunder.core.proxies import TensorProxy  # noqa: F401
from thunder.core.trace import TraceCtx
from thunder.executors.registry import get_all_executors, get_always_executors, get_default_executors  # noqa: F401
from thunder.module import ThunderModule
from thunder.plugins import discover  # noqa: F401  (plugins load on the first call, not on import)
from thunder.tracing.errors import DataDependentControlFlowError, TracingError  # noqa: F401

__version__ = "0.1.0"

__all__ = [
    "jit",
    "functional",
    "compile_data",
    "compile_stats",
    "last_traces",
    "last_backward_traces",
    "last_prologue_traces",
    "last_aliasing",
    "cache_option",
    "cache_hits",
    "cache_misses",
    "list_transforms",
    "last_interpreted_instructions",
    "last_interpreter_log",
    "last_compile_options",
    "wait_for_fusion",
    "fusion_states",
    "ThunderModule",
    "TensorProxy",
    "get_default_executors",
    "get_always_executors",
    "get_all_executors",
    "discover",
    "plugins",
]


def jit(
    fn: Callable | torch.nn.Module,
    /,
    *,
    langctx: Any = None,
    executors: Sequence | None = None,
    cache: str | CacheOption = "constant values",
    transforms: Sequence[Callable[[TraceCtx], TraceCtx]] | None = None,
    disable_torch_autograd: bool = False,
    **compile_options,
) -> Callable | ThunderModule:
    """Just-in-time compile a callable (function or model).

    Args:
        fn: a function, or a ``torch.nn.Module`` (then a ``ThunderModule`` sharing its state is returned).
        langctx: accepted for compatibility; the torch language is the only one.
        executors: executors (or their names) in priority order; defaults to
            ``thunder.get_default_executors()``. The torch and python executors are always appended.
        cache: ``"constant values"`` (specialise on shapes, dtypes, devices, requires_grad, Python
            values, module training flags, grad mode and autocast state; an argument dimension whose size
            changed between calls becomes symbolic), ``"symbolic values"`` (argument sizes are symbols from
            the first call; the prologue checks the relations the trace relied on), ``"same input"`` (no
            input checks: every call must look like the first) or ``"no caching"`` (trace every call).
        transforms: functions from trace to trace, applied after tracing.
        disable_torch_autograd: build no backward, even when inputs require grad.
        **compile_options: options read by executors and transforms (see ``last_compile_options``);
            ``dynamic=False`` keeps sizes numbers (one program per size), ``dynamic=True`` makes them symbolic
            from the first call; ``recompute="reshapes"`` keeps every elementwise value the backward reads
            from the forward, as eager autograd does (the default ``"elementwise"`` recomputes them from saved
            values: less memory, more kernels where nothing fuses them); ``conv_layout="as_given"`` keeps
            convolution chains in their inputs' memory format (the default ``"auto"``, with a fusion executor,
            runs networks with grouped convolutions in channels-last on the CPU; ``"channels_last"`` any network
            with 2-D convolutions: ``thunder.transforms.conv_layout``).

    Returns:
        A callable with the signature of ``fn``.
    """
    if isinstance(fn, (ThunderModule,)):
        fn = fn._model
    if langctx not in (None, "torch"):
        raise ValueError(f"langctx={langctx!r}: only the torch language is supported")
    cd = build_compile_data(
        fn,
        executors=executors,
        cache=cache,
        transforms=transforms,
        disable_torch_autograd=disable_torch_autograd,
        compile_options=compile_options,
    )
    compiled = make_compiled(cd)
    if cd.module is not None:
        tm = ThunderModule(cd.module, compiled)
        tm._lc_cd = cd
        # a module prepared before jit (e.g. by thunder.distributed.fsdp) finishes its set-up on the ThunderModule
        for setup in getattr(cd.module, "_thunder_jit_setup", ()):
            setup(tm)
        return tm
    functools.update_wrapper(compiled, fn)
    compiled._lc_cd = cd
    return compiled


from thunder import functional, plugins  # noqa: E402, F401


def compile_data(fn) -> CompileData:
    """Obtains the compilation data from a JITed function."""
    cd = getattr(fn, "_lc_cd", None)
    if cd is None:
        raise TypeError(f"{fn!r} is not a function or module compiled with thunder.jit")
    return cd


def compile_stats(fn) -> CompileStats:
    """Obtains the compilation statistics from a JITed function."""
    return compile_data(fn).stats


def _require_run(fn, value, what: str):
    if value is None:
        raise RuntimeError(f"{what} are only available after the jitted function has been called")
    return value


def last_traces(fn) -> list[TraceCtx]:
    """Obtains the list of computation traces that have been produced for the last run of the function."""
    return _require_run(fn, compile_stats(fn).last_traces, "traces")


def last_backward_traces(fn) -> list[TraceCtx]:
    """Obtains the list of backward traces that have been produced for the last run of the function."""
    return _require_run(fn, compile_stats(fn).last_backward_traces, "backward traces")


def last_prologue_traces(fn) -> list[TraceCtx]:
    """Obtains the list of prologue traces that have been produced for the last run of the function."""
    return _require_run(fn, compile_stats(fn).last_prologue_traces, "prologue traces")


def last_aliasing(fn) -> AliasingRecord:
    """What the program of the last run of ``fn`` aliases and writes: the inputs sharing a storage, the inputs it
    updates in place (in the order written back, with what autograd sees of each), the inputs it returns
    themselves and the outputs that may be views of inputs (``thunder.core.aliasing_record.AliasingRecord``;
    also printed as the header of ``last_traces(fn)[0]`` when not empty)."""
    traces = _require_run(fn, compile_stats(fn).last_traces, "traces")
    return traces[0].tags.get("aliasing") or AliasingRecord()


def cache_option(fn) -> CacheOption:
    """Returns the cache options set when JITting the function."""
    return compile_data(fn).cache_option


def cache_hits(fn) -> int:
    """Returns the number of cache hits we found when running the function."""
    return compile_stats(fn).cache_hits


def cache_misses(fn) -> int:
    """Returns the number of cache misses we found when running the function."""
    return compile_stats(fn).cache_misses


def list_transforms(fn) -> list:
    """Returns the list of (explicit) transforms applied to the JITed function."""
    return list(compile_data(fn).transforms)


def last_interpreter_log(fn) -> list[dict]:
    """What ran while tracing on the last cache miss: one record per intercepted call.

    Each record has the called function (``fn``), the symbol it became (``symbol``; ``"fallback"``
    for an operation run opaquely by PyTorch), the innermost calling line outside thunder
    (``file``, ``line``) and the user's line (``user_file``, ``user_line``).
    """
    from thunder.tracing.tracer import interpreter_log_records

    return interpreter_log_records(_require_run(fn, compile_stats(fn).last_interpreter_log, "the interpreter log"))


def last_interpreted_instructions(fn) -> list[str]:
    """The calls intercepted while tracing the user program (on the last cache miss), one line each."""
    return [f"{r['fn']} -> {r['symbol']}  ({r['file']}:{r['line']})" for r in last_interpreter_log(fn)]


def last_compile_options(fn, /) -> None:
    """Prints how compiled options were used (or not)."""
    cd = compile_data(fn)
    used = sorted(set(cd.compile_options) & set(cd.used_compile_options))
    unused = sorted(set(cd.compile_options) - set(cd.used_compile_options))
    print("Used compile options:")
    for name in used:
        print(f"  {name} = {cd.compile_options[name]!r}  ({cd.used_compile_options[name]})")
    if not used:
        print("  (none)")
    print("Unused compile options:")
    for name in unused:
        print(f"  {name} = {cd.compile_options[name]!r}")
    if not unused:
        print("  (none)")


from thunder.examine import examine  # noqa: E402, F401


def wait_for_fusion(fn, timeout: float | None = None) -> bool:
    """Waits until the fused programs that ``fn`` compiles in the background are in place.

    With a fusion executor that compiles slowly in the executor list (``torch_compile``), a new program first
    runs unfused while its fused version compiles on a background thread (``thunder.jit(..., fusion=...)``).
    Call this before timing steady-state calls. Returns ``False`` if ``timeout`` seconds passed first.
    """
    from thunder.compiler import wait_for_fusion as wait

    return wait(compile_data(fn), timeout)


def fusion_states(fn) -> list[str]:
    """For each cached program of ``fn``, most recently used first: ``"fused"`` (its fused version runs),
    ``"unfused"`` (it runs unfused while the fused version compiles), ``"failed"`` (compiling the fused
    version failed; the unfused one stays) or ``"not tiered"`` (no background fusion: one program)."""
    return [entry.fusion for entry in compile_data(fn).cache]
