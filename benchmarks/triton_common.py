"""The harness shared by the thunder-triton kernel benchmarks (``benchmarks/triton_*.py``).

Each benchmark describes its cases with :class:`Case`; :func:`main` times forward+backward of
every variant on the same inputs and prints one JSON object:

- ``eager``: the PyTorch code as written (the reference for the differences reported);
- ``torch_compile``: ``torch.compile`` of the same code (Inductor);
- ``thunder_triton``: ``thunder.jit(..., executors=thunder.discover())``: the triton kernels are
  claimed from the unmodified code (``claimed`` lists the triton operators in its traces);
- ``thunder_default``: ``thunder.jit(...)`` with the default executors only (no plugin): what
  thunder costs or gains without the kernels (not run unless named in ``--variants``);
- ``liger``: Liger-Kernel's kernel for the same computation (``pip install liger-kernel``; it is
  imported only for this variant and reported as skipped when missing).

Per variant: ``median_ms`` (median of ``--iters`` steps after ``--warmup``, CUDA events),
``peak_mib`` (peak memory allocated during one step above what was allocated before it), and
``max_abs_diff`` of the outputs and gradients against eager.

Without a CUDA GPU nothing is measured: the JSON says ``"skipped"`` and the exit status is 0.
``--smoke`` instead runs tiny shapes on the CPU through Triton's interpreter (eager and
thunder_triton only, wall-clock times, no memory figures): a check that the script and the
kernels run, not a measurement.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

VARIANTS = ("eager", "torch_compile", "thunder_triton", "liger", "thunder_default")
DEFAULT_VARIANTS = ("eager", "torch_compile", "thunder_triton", "liger")

if "--smoke" in sys.argv:  # the interpreter must be chosen before Triton is imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402


@dataclass
class Case:
    """One benchmarked shape.

    ``make(device, dtype)`` returns ``(fn, inputs)``: ``fn(*inputs)`` is the eager computation
    (a function or an ``nn.Module``) returning a tensor or a tuple of tensors, and ``inputs``
    the tensors (leaves that require grad get gradients). ``liger(fn, inputs)`` returns the
    Liger-Kernel callable taking the same inputs (it imports liger_kernel), or is ``None``.
    """

    label: str
    make: Callable
    liger: Callable | None = None
    params: dict = field(default_factory=dict)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def _make_variant(variant: str, fn, inputs, case: Case):
    if variant == "eager":
        return fn
    if variant == "torch_compile":
        return torch.compile(fn)
    if variant == "thunder_triton":
        import thunder

        return thunder.jit(fn, executors=thunder.discover())
    if variant == "thunder_default":
        import thunder

        return thunder.jit(fn)
    if case.liger is None:
        raise NotImplementedError("Liger-Kernel has no kernel for this computation")
    return case.liger(fn, inputs)


def _params(fn) -> list:
    return list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []


def _zero_grads(fn, inputs):
    for t in [*inputs, *_params(fn)]:
        if isinstance(t, torch.Tensor):
            t.grad = None


def _step(callable_, fn, inputs, grads):
    _zero_grads(fn, inputs)
    outs = _outputs(callable_(*inputs))
    torch.autograd.backward(outs, grads)
    return outs


def _grads(fn, inputs) -> list:
    return [t.grad for t in [*inputs, *_params(fn)] if isinstance(t, torch.Tensor) and t.grad is not None]


def _claimed(jfn) -> list[str]:
    import thunder

    text = str(thunder.last_traces(jfn)[-1])
    bwd = thunder.last_backward_traces(jfn)
    if bwd:
        text += str(bwd[-1])
    names = set()
    for word in text.replace("(", " ").split():
        if word.startswith("triton_") and word.isidentifier():
            names.add(word)
    return sorted(names)


def measure(variant: str, case: Case, device: str, dtype, iters: int, warmup: int, reference) -> tuple[dict, tuple]:
    torch.manual_seed(0)
    fn, inputs = case.make(device, dtype)
    callable_ = _make_variant(variant, fn, inputs, case)
    cuda = device == "cuda"
    first = _outputs(callable_(*inputs))
    torch.manual_seed(1)
    grads = [torch.randn_like(o).detach() for o in first]
    del first
    for _ in range(warmup):
        _step(callable_, fn, inputs, grads)
    if cuda:
        torch.cuda.synchronize()
        _zero_grads(fn, inputs)
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    outs = _step(callable_, fn, inputs, grads)
    peak_mib = None
    if cuda:
        torch.cuda.synchronize()
        peak_mib = round((torch.cuda.max_memory_allocated() - base) / 2**20, 1)
    result_grads = [g.detach().clone() for g in _grads(fn, inputs)]
    result_outs = [o.detach().clone() for o in outs]

    times = []
    for _ in range(iters):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            _step(callable_, fn, inputs, grads)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            _step(callable_, fn, inputs, grads)
            times.append((time.perf_counter() - t0) * 1e3)
    result = {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4), "peak_mib": peak_mib}
    if variant == "thunder_triton":
        result["claimed"] = _claimed(callable_)
    if reference is None:
        reference = (result_outs, result_grads)
    else:
        ref_outs, ref_grads = reference
        diffs = [(a.float() - b.float()).abs().max().item() for a, b in zip(result_outs, ref_outs) if a.numel()]
        result["max_abs_diff_out"] = max(diffs, default=0.0)
        if len(result_grads) == len(ref_grads):
            gd = [(a.float() - b.float()).abs().max().item() for a, b in zip(result_grads, ref_grads) if a.numel()]
            result["max_abs_diff_grad"] = max(gd, default=0.0)
    return result, reference


def main(name: str, description: str, cases: Callable[[bool], list[Case]], patterns: tuple[str, ...] = ()) -> None:
    """Parses the command line, measures every case and variant, prints one JSON object.

    ``cases(smoke)`` returns the cases: tiny ones when ``smoke`` is true. ``patterns`` names the
    opt-in triton patterns the ``thunder_triton`` variant switches on (its kernel's benchmark
    measures the kernel, claimed by default or not).
    """
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=None, choices=VARIANTS)
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny shapes on the CPU through Triton's interpreter")
    parser.add_argument(
        "--json-out",
        metavar="PATH",
        help="also write the JSON object to PATH, rewritten after every case (a run cut short keeps what it measured)",
    )
    args = parser.parse_args()

    def emit(final: bool) -> None:
        text = json.dumps(out, indent=1)
        if args.json_out:
            with open(args.json_out, "w") as f:
                f.write(text + "\n")
        if final:
            print(text)

    out = {
        "benchmark": name,
        "dtype": args.dtype,
        "torch": torch.__version__,
        "triton": _version("triton"),
        "thunder_core": _version("thunder-core"),
        "thunder_triton": _version("thunder-triton"),
        "liger_kernel": _version("liger-kernel"),
    }
    smoke = args.smoke
    if not smoke and not torch.cuda.is_available():
        out["skipped"] = "no CUDA GPU is available: this benchmark measures GPU kernels (--smoke runs tiny CPU shapes)"
        emit(final=True)
        return
    device = "cpu" if smoke else "cuda"
    variants = args.variants or (["eager", "thunder_triton"] if smoke else list(DEFAULT_VARIANTS))
    if patterns and "thunder_triton" in variants:
        from thunder_triton import get_executor

        get_executor().enable_patterns(*patterns)
        out["enabled_patterns"] = list(patterns)
    if smoke:
        args.iters, args.warmup = min(args.iters, 2), min(args.warmup, 1)
        out["smoke"] = "CPU, Triton interpreter, tiny shapes: checks that the benchmark runs; the times mean nothing"
    else:
        out["gpu"] = torch.cuda.get_device_name()
    dtype = getattr(torch, args.dtype)
    results = out["results"] = {}
    out["timing"] = f"forward+backward, median of {args.iters} steps after {args.warmup} warm-up steps"
    for case in cases(smoke):
        row = {}
        reference = None
        for variant in sorted(variants, key=lambda v: v != "eager"):  # eager first: the reference
            print(f"{case.label} {variant}", file=sys.stderr)
            try:
                row[variant], ref = measure(variant, case, device, dtype, args.iters, args.warmup, reference)
                if variant == "eager":
                    reference = ref
            except ImportError as e:
                row[variant] = {"skipped": f"not installed: {e}"}
            except Exception as e:  # a failing variant (out of memory, unsupported) is reported, not fatal
                row[variant] = {"error": f"{type(e).__name__}: {e}"}
            if device == "cuda":
                torch.cuda.empty_cache()
        eager = row.get("eager", {})
        if "median_ms" in eager:
            for variant, r in row.items():
                if variant != "eager" and "median_ms" in r:
                    r["speedup_vs_eager"] = round(eager["median_ms"] / r["median_ms"], 3)
                    if r["peak_mib"] is not None and eager["peak_mib"]:
                        r["peak_vs_eager"] = round(r["peak_mib"] / eager["peak_mib"], 3)
        results[case.label] = {"params": case.params, **row}
        emit(final=False)
    emit(final=True)
