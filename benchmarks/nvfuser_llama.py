"""GPU benchmark: thunder + nvFuser vs eager vs torch.compile (needs CUDA and thunder-nvfuser with nvFuser).

Cases:

- ``mlp``: LitGPT ``LLaMAMLP`` forward, 4096 -> 11008, input 2x2048x4096, float32;
- ``rope``: LitGPT's ``apply_rope`` forward + backward on (2, 32, 4096, 128) bf16;
- ``llama``: a LitGPT Llama-2-7b-shaped model with ``--layers`` layers (default 2), bf16, one
  training step: forward, cross-entropy, backward.

Variants: ``eager``, ``thunder_nvfuser`` (``thunder.jit(m, executors=[nvfuser, *defaults])``),
``thunder_nvfuser_noremat`` (the same without recomputing cheap values in backward:
``NvFuserExecutor(rematerialize=False)``), ``torch_compile``. Per variant and case:
``first_s`` (the first call: tracing and compiling included), ``median_ms`` over ``--iters``
timed calls after ``--warmup`` more, with ``torch.cuda.synchronize()`` around each,
``peak_mem_mb`` (``torch.cuda.max_memory_allocated`` over the timed calls, model and inputs
included), ``median_vs_eager``; for the thunder variants of training cases ``saved_tensors`` and
``saved_mb`` (what the forward saves for backward).

    python benchmarks/nvfuser_llama.py                      # all cases
    python benchmarks/nvfuser_llama.py --cases llama --layers 4

Prints exactly one JSON object on stdout; progress goes to stderr. Without a CUDA device it prints
``{"skipped": "<why>", ...}`` and exits with status 0; without a usable nvFuser the thunder
variants report ``{"skipped": "<why>"}`` and the others are measured.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

VARIANTS = ("eager", "thunder_nvfuser", "thunder_nvfuser_noremat", "torch_compile")
THUNDER_VARIANTS = ("thunder_nvfuser", "thunder_nvfuser_noremat")
CASES = ("mlp", "rope", "llama")


def _wrap(variant: str, fn):
    if variant == "eager":
        return fn
    if variant == "torch_compile":
        return torch.compile(fn)
    import thunder
    from thunder_nvfuser.executor import NvFuserExecutor

    ex = NvFuserExecutor(rematerialize=variant == "thunder_nvfuser")
    return thunder.jit(fn, executors=[ex, *thunder.get_default_executors()])


def _saved(fn) -> dict:
    """What a thunder-jitted training step's forward saves for backward (count and MB)."""
    import thunder
    from thunder.extend import saved_for_backward

    if not thunder.last_backward_traces(fn):
        return {}
    saved = [p for p in saved_for_backward(thunder.last_traces(fn)[-1]) if hasattr(p, "numel")]
    return {
        "saved_tensors": len(saved),
        "saved_mb": round(sum(p.numel() * p.dtype.bytes for p in saved) / 2**20, 2),
    }


def _time(step, warmup: int, iters: int) -> dict:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(warmup):
        step()
    times = []
    torch.cuda.reset_peak_memory_stats()
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return {
        "first_s": round(first, 3),
        "median_ms": round(statistics.median(times), 4),
        "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20, 1),
    }


def case_mlp(variant: str, args) -> dict:
    from litgpt.config import Config
    from litgpt.model import LLaMAMLP

    config = Config(n_embd=4096, intermediate_size=11008, bias=False)
    model = LLaMAMLP(config).to("cuda")
    x = torch.randn(2, 2048, 4096, device="cuda")
    fn = _wrap(variant, model)

    def step():
        with torch.no_grad():
            fn(x)

    return _time(step, args.warmup, args.iters)


def case_rope(variant: str, args) -> dict:
    from litgpt.model import apply_rope, build_rope_cache

    b, h, t, d = 2, 32, 4096, 128
    cos, sin = build_rope_cache(t, d, device=torch.device("cuda"))
    cos, sin = cos.to(torch.bfloat16), sin.to(torch.bfloat16)
    x = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    fn = _wrap(variant, apply_rope)
    g = torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16)

    def step():
        fn(x, cos, sin).backward(g)
        x.grad = None

    out = _time(step, args.warmup, args.iters)
    if variant in THUNDER_VARIANTS:
        out.update(_saved(fn))
    return out


def case_llama(variant: str, args) -> dict:
    from litgpt import GPT, Config

    config = Config.from_name("Llama-2-7b-hf", n_layer=args.layers, block_size=args.seq)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT(config).to(torch.bfloat16)
    fn = _wrap(variant, model)
    vocab = config.padded_vocab_size
    idx = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")
    targets = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")

    def step():
        logits = fn(idx)
        F.cross_entropy(logits.reshape(-1, vocab).float(), targets.reshape(-1)).backward()
        for p in model.parameters():
            p.grad = None

    out = _time(step, args.warmup, args.iters)
    out["params"] = sum(p.numel() for p in model.parameters())
    if variant in THUNDER_VARIANTS:
        out.update(_saved(fn))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--layers", type=int, default=2, help="llama: transformer layers (the 7b model has 32)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()

    try:
        from thunder_nvfuser import runtime
    except ImportError as e:  # thunder-nvfuser itself missing: say so, measure nothing
        runtime, nvfuser_reason = (
            None,
            f"thunder-nvfuser is not importable ({e}): pip install -e packages/thunder-nvfuser",
        )
    else:
        nvfuser_reason = runtime.unavailable_reason()
    if not torch.cuda.is_available():
        cuda_reason = (runtime.cuda_unavailable_reason() if runtime is not None else None) or (
            f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
        )
        print(f"{sys.argv[0]}: needs a CUDA GPU; nothing measured: {cuda_reason}", file=sys.stderr)
        print(json.dumps({"skipped": cuda_reason, "torch": torch.__version__, "cuda": torch.version.cuda}))
        return 0
    reason = nvfuser_reason
    results: dict = {}
    runners = {"mlp": case_mlp, "rope": case_rope, "llama": case_llama}
    for case in args.cases:
        results[case] = {}
        for variant in args.variants:
            if variant in THUNDER_VARIANTS and reason is not None:
                results[case][variant] = {"skipped": f"nvFuser unavailable: {reason}"}
                continue
            print(f"{case} / {variant} ...", file=sys.stderr, flush=True)
            try:
                results[case][variant] = runners[case](variant, args)
            except Exception as e:  # report and go on with the others
                results[case][variant] = {"error": f"{type(e).__name__}: {e}"}
            torch.cuda.empty_cache()
            print(f"  {results[case][variant]}", file=sys.stderr, flush=True)
        eager = results[case].get("eager", {}).get("median_ms")
        if eager:
            for r in results[case].values():
                if "median_ms" in r:
                    r["median_vs_eager"] = round(r["median_ms"] / eager, 3)

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    out = {
        "results": results,
        "config": {"layers": args.layers, "batch": args.batch, "seq": args.seq, "iters": args.iters},
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nvfuser_distribution": runtime.installed_distribution() if runtime is not None else None,
        "nvfuser_module": runtime.installed_module() if runtime is not None else None,
        "thunder_core": version("thunder-core"),
        "thunder_nvfuser": version("thunder-nvfuser"),
    }
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
