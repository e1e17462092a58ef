"""Training step of a 4-layer LitGPT Llama on CPU: eager vs thunder (default executors), and optionally
thunder with ``thunder.discover()``'s executors (on CPU: Inductor regions compiled in the background) and
``torch.compile``.

Prints one JSON object: median step time, first-call (compile) time, forward-only compile time,
and the peak memory of a step: the most heap bytes in use (glibc ``mallinfo2``: small blocks plus
mmapped ones, which is where tensor storage lives) sampled after every aten operation, minus
the bytes in use when the step starts. Each variant runs in its own process. With ``--wall-steps N``
each variant also reports ``wall_s``: the time its first N steps take from a fresh model, compiles
included (for ``thunder_discover``, the steps run unfused until the background compile is done;
``fused_after_steps`` says from which step the fused program ran). The steady ``median_step_s`` is taken
after that, once every program is fused.

    python benchmarks/training_step.py [--layers 4] [--steps 10]
    python benchmarks/training_step.py --variants eager thunder thunder_discover torch_compile --wall-steps 100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def _config(layers: int):
    from thunder.tests.litgpt_model import Config  # knows the "llama-tiny" config (n_embd 256, 4 heads)

    return Config.from_name("llama-tiny", n_layer=layers, n_query_groups=4)


class _Mallinfo2(__import__("ctypes").Structure):
    _fields_ = [
        (name, __import__("ctypes").c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _heap_in_use():
    """A function returning the heap bytes in use, or None where glibc's mallinfo2 is missing."""
    import ctypes

    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = _Mallinfo2

    def in_use() -> int:
        m = fn()
        return m.uordblks + m.hblkhd

    return in_use


def peak_bytes_of(step) -> int | None:
    """Peak heap bytes in use during ``step()`` above those in use at its start."""
    from torch.utils._python_dispatch import TorchDispatchMode

    in_use = _heap_in_use()
    if in_use is None:
        return None

    class _Sampler(TorchDispatchMode):
        peak = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            _Sampler.peak = max(_Sampler.peak, in_use())
            return out

    start = in_use()
    _Sampler.peak = start
    with _Sampler():
        step()
    return _Sampler.peak - start


VARIANTS = ("eager", "thunder", "thunder_discover", "torch_compile")


def run_variant(variant: str, layers: int, steps: int, wall_steps: int = 0) -> dict:
    import torch
    import torch.nn.functional as F
    from litgpt import GPT

    torch.manual_seed(0)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    model = GPT(_config(layers))
    x = torch.randint(0, 1024, (2, 256))
    y = torch.randint(0, 1024, (2, 256))
    result: dict = {}
    if variant.startswith("thunder"):
        import thunder
    if variant == "thunder":
        t0 = time.perf_counter()
        with torch.no_grad():
            fwd_only = thunder.jit(GPT(_config(layers)).requires_grad_(False))
            fwd_only(x)
        result["forward_only_first_call_s"] = time.perf_counter() - t0
        result["forward_only_compile_s"] = thunder.compile_stats(fwd_only).last_compile_time_ns / 1e9
        del fwd_only
        runner = thunder.jit(model)
    elif variant == "thunder_discover":
        runner = thunder.jit(model, executors=thunder.discover())
        result["executors"] = [ex.name for ex in thunder.discover()]
    elif variant == "torch_compile":
        runner = torch.compile(model)
    else:
        runner = model

    def step():
        logits = runner(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        model.zero_grad(set_to_none=True)

    start = t0 = time.perf_counter()
    step()
    result["first_call_s"] = time.perf_counter() - t0
    if variant.startswith("thunder"):
        result["training_compile_s"] = thunder.compile_stats(runner).last_compile_time_ns / 1e9
    fused_after = None
    for i in range(1, wall_steps):
        step()
        if variant == "thunder_discover" and fused_after is None and "unfused" not in thunder.fusion_states(runner):
            fused_after = i + 1
    if wall_steps:
        result["wall_s"] = time.perf_counter() - start
    if variant == "thunder_discover":
        t0 = time.perf_counter()
        thunder.wait_for_fusion(runner)
        result["fusion_wait_s"] = time.perf_counter() - t0
        result["fused_after_steps"] = fused_after
        result["fusion_states"] = thunder.fusion_states(runner)
    step()
    if variant == "thunder_discover":  # (the traces of the last call: the fused program's, once it is swapped in)
        fwd, bwd = thunder.last_traces(runner)[-1], thunder.last_backward_traces(runner)[-1]
        result["fused_regions"] = sum(
            "fusion" in b.sym.tags for t in (fwd, bwd) if t is not None for b in t.bound_symbols
        )
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    result["median_step_s"] = statistics.median(times)
    # (the first step under the sampler's dispatch mode is a cache miss for thunder, whose programs are specific
    # to the active modes: its compile would count as the step's memory)
    peak_bytes_of(step)
    peak = peak_bytes_of(step)
    if peak is not None:
        result["step_peak_mib"] = peak / 2**20
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--variants", nargs="+", default=["eager", "thunder"], choices=VARIANTS)
    p.add_argument("--wall-steps", type=int, default=0, help="also time the first N steps of each variant")
    p.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.variant:
        print(json.dumps(run_variant(args.variant, args.layers, args.steps, args.wall_steps)))
        return
    out = {"model": f"LitGPT Llama, {args.layers} layers, n_embd 256, batch 2 x 256 tokens, float32, CPU"}
    variants = ["eager", *[v for v in args.variants if v != "eager"]]
    for variant in variants:
        cmd = [sys.executable, __file__, "--variant", variant, "--layers", str(args.layers), "--steps", str(args.steps)]
        proc = subprocess.run([*cmd, "--wall-steps", str(args.wall_steps)], capture_output=True, text=True, check=True)
        out[variant] = json.loads(proc.stdout.strip().splitlines()[-1])
    for variant in variants[1:]:
        out[f"{variant}_step_over_eager"] = out[variant]["median_step_s"] / out["eager"]["median_step_s"]
    if "thunder_discover" in out and "torch_compile" in out:
        out["thunder_discover_step_over_torch_compile"] = (
            out["thunder_discover"]["median_step_s"] / out["torch_compile"]["median_step_s"]
        )
    if "step_peak_mib" in out["eager"] and "thunder" in out:
        out["thunder_peak_over_eager"] = out["thunder"]["step_peak_mib"] / max(out["eager"]["step_peak_mib"], 1e-9)
    import torch

    out["torch"] = torch.__version__
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
