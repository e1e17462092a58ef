"""Training step of a 4-layer Llama on CPU (LitGPT's ``GPT``, or Hugging Face's ``LlamaForCausalLM`` with
``--model hf_llama``; random weights, nothing downloaded): eager vs thunder (default executors), and optionally
thunder with ``thunder.discover()``'s executors (on CPU: Inductor regions compiled in the background) and
``torch.compile``.

All variants run in one process, each on its own copy of the model (same weights):

1. one variant after the other: its first call (``first_call_s``, after a ``gc.collect()`` of the variants
   before it; ``first_call_overhead_s`` is that less its steady step) and, with ``--wall-steps N``, ``wall_s``, the time its first N steps take from a fresh model,
   compiles included (for ``thunder_discover`` the steps run unfused until the background compile is done;
   ``fused_after_steps`` says from which step the fused program ran; then its pending fusion is waited for,
   so that it does not run during the next variant's steps);
2. then ``--steps`` rounds of one steady step per variant, the variants' order rotated each round, so that a
   change of the machine's load hits every variant alike. ``median_step_s`` is a variant's median over the rounds,
   and ``<a>_step_over_<b>`` the median over the rounds of the ratio of the two variants' steps in that round;
   ``rounds`` lists every round's step times.

Peak memory of a step: the most heap bytes in use (glibc ``mallinfo2``: small blocks plus mmapped ones, which is
where tensor storage lives) sampled after every aten operation, minus the bytes in use when the step starts.

Inductor's on-disk caches point at a fresh temporary directory unless ``--warm-inductor-cache``, so that the
compiles of ``thunder_discover`` and ``torch_compile`` are cold, as a new user's are.

    python benchmarks/training_step.py [--model litgpt|hf_llama] [--layers 4] [--steps 10]
    python benchmarks/training_step.py --variants eager thunder thunder_discover torch_compile --wall-steps 100
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time

from bench_env import settle_fusion


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
    """Peak bytes of tensor memory in use during ``step()`` above those in use at its start, from the profiler's
    record of every allocation and free of PyTorch's CPU allocator (a compiled graph's buffers included: Inductor's
    ``empty_strided_cpu`` allocates through it). Exact, and it leaves the program alone: an earlier sampler ran
    the step under a ``TorchDispatchMode``, which made thunder compile and run another program for the active mode
    (whose fused regions held ~28 MiB more) and measured that one. ``None`` where the profiler records no memory."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    in_use = peak = 0
    seen = False
    for event in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns()):
        if event.name() == "[memory]":
            seen = True
            in_use += event.nbytes()
            peak = max(peak, in_use)
    return peak if seen else None


VARIANTS = ("eager", "thunder", "thunder_discover", "torch_compile")
MODELS = ("litgpt", "hf_llama")


def build_model(kind: str, layers: int):
    """The model (random weights, seeded) and a batch of 2 x 256 tokens with its targets."""
    import torch

    torch.manual_seed(0)
    if kind == "litgpt":
        from litgpt import GPT

        model = GPT(_config(layers))
    else:
        import transformers

        cfg = transformers.LlamaConfig(
            vocab_size=1024,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=layers,
            num_attention_heads=4,
            num_key_value_heads=4,
            max_position_embeddings=512,
            attn_implementation="sdpa",
        )
        model = transformers.LlamaForCausalLM(cfg)
    generator = torch.Generator().manual_seed(1)
    x = torch.randint(0, 1024, (2, 256), generator=generator)
    y = torch.randint(0, 1024, (2, 256), generator=generator)
    return model, x, y


class Variant:
    """One way of running the model's training step, on its own copy of the model."""

    def __init__(self, name: str, kind: str, layers: int):
        import torch

        self.name = name
        self.model, self.x, self.y = build_model(kind, layers)
        self.result: dict = {}
        if name.startswith("thunder"):
            import thunder

            self.thunder = thunder
        if name == "thunder":
            fwd_model = build_model(kind, layers)[0].requires_grad_(False)
            t0 = time.perf_counter()
            with torch.no_grad():
                fwd_only = thunder.jit(fwd_model)
                fwd_only(self.x)
            self.result["forward_only_first_call_s"] = time.perf_counter() - t0
            self.result["forward_only_compile_s"] = thunder.compile_stats(fwd_only).last_compile_time_ns / 1e9
            del fwd_only, fwd_model
            self.runner = thunder.jit(self.model)
        elif name == "thunder_discover":
            executors = thunder.discover()
            self.result["executors"] = [ex.name for ex in executors]
            self.runner = thunder.jit(self.model, executors=executors)
        elif name == "torch_compile":
            self.runner = torch.compile(self.model)
        else:
            self.runner = self.model

    def step(self) -> None:
        import torch.nn.functional as F

        out = self.runner(self.x)
        logits = out if not hasattr(out, "logits") else out.logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.y.reshape(-1))
        loss.backward()
        self.model.zero_grad(set_to_none=True)

    def timed_step(self) -> float:
        t0 = time.perf_counter()
        self.step()
        return time.perf_counter() - t0

    def warm_up(self, wall_steps: int) -> None:
        """The first call, the first ``wall_steps`` steps, and (thunder_discover) the background fusion's end."""
        result, discover = self.result, self.name == "thunder_discover"
        # (the garbage of the variants before, and of the thunder variant's forward-only compile, collected first: a
        # full collection it would trigger scans every object of the process, 0.2 s here, in whichever first call)
        gc.collect()
        start = time.perf_counter()
        result["first_call_s"] = self.timed_step()
        if self.name.startswith("thunder"):
            result["training_compile_s"] = self.thunder.compile_stats(self.runner).last_compile_time_ns / 1e9
        fused_after = None
        for i in range(1, wall_steps):
            self.step()
            if discover and fused_after is None and "unfused" not in self.thunder.fusion_states(self.runner):
                fused_after = i + 1
        if wall_steps:
            result["wall_s"] = time.perf_counter() - start
        if discover:
            t0 = time.perf_counter()
            self.thunder.wait_for_fusion(self.runner)
            result["fusion_wait_s"] = time.perf_counter() - t0
            result["fused_after_steps"] = fused_after
            result["fusion_states"] = self.thunder.fusion_states(self.runner)
        self.step()
        if discover:
            # the fused regions' first calls queue graphs for the input layouts they meet (torch_compile's regions)
            t0 = time.perf_counter()
            settle_fusion(self.thunder, self.runner, self.step)
            result["layout_wait_s"] = time.perf_counter() - t0
        if discover:  # (the traces of the last call: the fused program's, once it is swapped in)
            thunder = self.thunder
            fwd, bwd = thunder.last_traces(self.runner)[-1], thunder.last_backward_traces(self.runner)[-1]
            result["fused_regions"] = sum(
                "fusion" in b.sym.tags for t in (fwd, bwd) if t is not None for b in t.bound_symbols
            )


def run(kind: str, variants: list[str], layers: int, steps: int, wall_steps: int) -> dict:
    import torch

    # one intra-op thread per core the process may run on (OMP_NUM_THREADS, if set, wins); a process pinned to
    # fewer cores (taskset) than the machine has would otherwise run more threads than cores, which spin and wait
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS") or max(1, cores)))
    out: dict = {}
    runs = []
    for name in variants:  # one after the other: their compiles and wall times do not overlap
        variant = Variant(name, kind, layers)
        variant.warm_up(wall_steps)
        print(f"[training_step] {name}: {json.dumps(variant.result)}", file=sys.stderr, flush=True)
        runs.append(variant)
    rounds = []
    for r in range(steps):  # interleaved: one step of each variant per round, the order rotated
        order = runs[r % len(runs) :] + runs[: r % len(runs)]
        rounds.append({v.name: v.timed_step() for v in order})
        print(f"[training_step] round {r}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    for v in runs:
        v.result["median_step_s"] = statistics.median(rd[v.name] for rd in rounds)
        v.result["min_step_s"] = min(rd[v.name] for rd in rounds)
        v.result["first_call_overhead_s"] = v.result["first_call_s"] - v.result["median_step_s"]
        if v.name == "thunder_discover":
            v.thunder.wait_for_fusion(v.runner)
        peak = peak_bytes_of(v.step)
        if peak is not None:
            v.result["step_peak_mib"] = peak / 2**20
        out[v.name] = v.result
    out["rounds"] = rounds
    pairs = [(a, "eager") for a in variants if a != "eager"]
    pairs += [("thunder_discover", "torch_compile")] if {"thunder_discover", "torch_compile"} <= set(variants) else []
    for a, b in pairs:
        out[f"{a}_step_over_{b}"] = statistics.median(rd[a] / rd[b] for rd in rounds)
        if wall_steps:
            out[f"{a}_wall_over_{b}"] = out[a]["wall_s"] / out[b]["wall_s"]
    if "step_peak_mib" in out["eager"]:
        for a in variants[1:]:
            out[f"{a}_peak_over_eager"] = out[a]["step_peak_mib"] / max(out["eager"]["step_peak_mib"], 1e-9)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=MODELS, default="litgpt")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=10, help="rounds of interleaved steady steps")
    p.add_argument("--variants", nargs="+", default=["eager", "thunder"], choices=VARIANTS)
    p.add_argument("--wall-steps", type=int, default=0, help="also time the first N steps of each variant")
    p.add_argument(
        "--warm-inductor-cache", action="store_true", help="use Inductor's usual on-disk caches (default: a fresh one)"
    )
    args = p.parse_args()
    if args.steps < 1:
        p.error("--steps must be at least 1")
    cache_dir = None
    if not args.warm_inductor_cache:
        # (ignore_cleanup_errors: Inductor's compile workers may still write there as the process ends)
        cache_dir = tempfile.TemporaryDirectory(prefix="training_step_inductor_", ignore_cleanup_errors=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir.name
        os.environ["TRITON_CACHE_DIR"] = os.path.join(cache_dir.name, "triton")
    variants = ["eager", *dict.fromkeys(v for v in args.variants if v != "eager")]
    model = (
        f"LitGPT Llama, {args.layers} layers, n_embd 256"
        if args.model == "litgpt"
        else f"HF LlamaForCausalLM, {args.layers} layers, hidden 256"
    )
    out = {"model": f"{model}, batch 2 x 256 tokens, float32, CPU", "variants_interleaved": True}
    out.update(run(args.model, variants, args.layers, args.steps, args.wall_steps))
    import torch

    out["torch"] = torch.__version__
    print(json.dumps(out, indent=2))
    if cache_dir is not None:
        cache_dir.cleanup()


if __name__ == "__main__":
    main()
