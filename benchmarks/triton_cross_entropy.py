"""Cross-entropy forward+backward on a GPU: thunder-triton's fused kernels vs eager vs torch.compile.

For each (tokens, vocabulary) shape, bfloat16 logits and int64 targets (a few ignored with
``ignore_index=-100``), ``F.cross_entropy(logits, targets)`` followed by ``loss.backward()``:

- ``eager``: PyTorch;
- ``thunder``: ``thunder.jit`` with the default executors (the decomposition, run by PyTorch);
- ``thunder_triton``: ``thunder.jit`` with the ``triton`` executor first (the fused kernels);
- ``torch_compile``: ``torch.compile`` (Inductor).

Per variant: ``median_ms`` (median over ``--iters`` timed forward+backward steps, CUDA events,
after ``--warmup`` steps), ``peak_mib`` (peak memory allocated during one step above what the
inputs occupy) and ``max_abs_diff_loss``/``max_abs_diff_grad`` against eager.

    python benchmarks/triton_cross_entropy.py
    python benchmarks/triton_cross_entropy.py --shapes 4096x32000 8192x128256 --variants eager thunder_triton

Needs thunder-core and thunder-triton installed and a CUDA GPU; without one it prints a JSON
object saying so and exits with status 0. Prints exactly one JSON object on stdout; progress
goes to stderr.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import sys

import torch
import torch.nn.functional as F

VARIANTS = ("eager", "thunder", "thunder_triton", "torch_compile")
DEFAULT_SHAPES = ("4096x32000", "4096x50257", "4096x128256", "8192x128256")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, targets, ignore_index=-100)


def _make_fn(variant: str):
    if variant == "eager":
        return _loss
    if variant == "torch_compile":
        return torch.compile(_loss)
    import thunder

    if variant == "thunder":
        return thunder.jit(_loss)
    from thunder_triton import get_executor

    return thunder.jit(_loss, executors=[get_executor(), *thunder.get_default_executors()])


def _step(fn, logits, targets):
    logits.grad = None
    loss = fn(logits, targets)
    loss.backward()
    return loss


def _measure(variant: str, tokens: int, vocab: int, iters: int, warmup: int, reference) -> dict:
    torch.manual_seed(0)
    logits = torch.randn(tokens, vocab, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    targets = torch.randint(0, vocab, (tokens,), device="cuda")
    targets[:: max(1, tokens // 16)] = -100
    fn = _make_fn(variant)
    for _ in range(warmup):
        loss = _step(fn, logits, targets)
    torch.cuda.synchronize()

    # peak memory of one step, above the inputs (logits, targets) and an unreleased old grad
    logits.grad = None
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    loss = _step(fn, logits, targets)
    torch.cuda.synchronize()
    peak_mib = (torch.cuda.max_memory_allocated() - base) / 2**20

    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        _step(fn, logits, targets)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))

    result = {
        "median_ms": round(statistics.median(times), 4),
        "min_ms": round(min(times), 4),
        "peak_mib": round(peak_mib, 1),
    }
    if reference is not None:
        ref_loss, ref_grad = reference
        result["max_abs_diff_loss"] = (loss.float() - ref_loss.float()).abs().item()
        result["max_abs_diff_grad"] = (logits.grad.float() - ref_grad.float()).abs().max().item()
    else:
        reference = (loss.detach().clone(), logits.grad.detach().clone())
    del logits, targets, loss, fn
    torch.cuda.empty_cache()
    return result, reference


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=list(DEFAULT_SHAPES), help="TOKENSxVOCAB, e.g. 4096x32000")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    out = {
        "benchmark": "triton_cross_entropy",
        "dtype": "bfloat16",
        "torch": torch.__version__,
        "thunder_core": _version("thunder-core"),
        "thunder_triton": _version("thunder-triton"),
        "triton": _version("triton"),
    }
    if not torch.cuda.is_available():
        out["skipped"] = "no CUDA GPU is available: this benchmark measures GPU kernels"
        print("no CUDA GPU is available; nothing measured", file=sys.stderr)
        print(json.dumps(out, indent=1))
        return
    try:
        import thunder  # noqa: F401
        import thunder_triton  # noqa: F401
    except ImportError as e:
        sys.exit(f"this benchmark needs thunder-core and thunder-triton installed: {e}")

    out["gpu"] = torch.cuda.get_device_name()
    results = {}
    for shape in args.shapes:
        tokens, vocab = (int(x) for x in shape.lower().split("x"))
        row = {}
        reference = None
        # eager first: it is the reference the others are compared with
        order = sorted(args.variants, key=lambda v: v != "eager")
        for variant in order:
            print(f"{shape} {variant}", file=sys.stderr)
            try:
                row[variant], ref = _measure(variant, tokens, vocab, args.iters, args.warmup, reference)
                if variant == "eager":
                    reference = ref
            except Exception as e:  # a variant that fails (e.g. out of memory) is reported, not fatal
                row[variant] = {"error": f"{type(e).__name__}: {e}"}
                torch.cuda.empty_cache()
        if "eager" in row and "median_ms" in row["eager"]:
            for variant, r in row.items():
                if variant != "eager" and "median_ms" in r:
                    r["speedup_vs_eager"] = round(row["eager"]["median_ms"] / r["median_ms"], 3)
                    r["peak_vs_eager"] = round(r["peak_mib"] / max(row["eager"]["peak_mib"], 1e-9), 3)
        results[shape] = row
    out["results"] = results
    out["timing"] = f"forward+backward, median of {args.iters} steps after {args.warmup} warm-up steps, CUDA events"
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
