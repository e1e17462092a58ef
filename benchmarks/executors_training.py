"""Training-step time of a LitGPT Llama with different executors: a small one on the CPU, or Llama-2-7b-shaped layers on a GPU.

One training step is forward, cross-entropy loss, backward and an AdamW step. Variants:

- ``eager``: the model as it is;
- ``thunder_default``: ``thunder.jit(model)`` (the default executors: sdpa, torch, python);
- ``thunder_torch_compile``: ``thunder.jit(model, executors=["torch_compile", *defaults])``:
  regions of the forward and backward traces compiled by Inductor (C++ on the CPU) in the background
  while the first steps run the unfused program (tiered compilation, ``fusion="background"``);
- ``thunder_torch_compile_wait``: the same with ``fusion="wait"``: the first step compiles the regions;
- ``torch_compile``: ``torch.compile(model)``;
- ``thunder_discover``: ``thunder.jit(model, executors=thunder.discover())``: the executors of
  the installed plugins that can run here (on a GPU: Triton kernels, nvFuser, ...).

Per variant: ``first_step_s`` (the first step of a fresh model: tracing and compiling included),
``wall_s`` (the first step and the ``--steps`` steps after it, as a user's loop runs them: under
``fusion="background"`` the steps that run while Inductor compiles are unfused), ``fused_after_steps``
(for the background variant: the step from which the fused program ran), ``median_step_s`` (the median of
``--steps`` more steps, once every program is fused), ``loss_first`` and ``loss_last`` (the loss of the
first and last step: every variant starts from the same weights and sees the same batches, so these should
agree with eager's up to rounding). On CUDA also ``peak_mib``:
``torch.cuda.max_memory_allocated`` over the timed steps (model, gradients and optimizer state
included) and ``peak_step_mib``, the part above what was allocated before the steps.

    OMP_NUM_THREADS=1 python benchmarks/executors_training.py
    python benchmarks/executors_training.py --layers 2 --steps 10 --variants eager thunder_default
    python benchmarks/executors_training.py --device cuda --dtype bfloat16 --config Llama-2-7b-hf \
        --layers 4 --batch 1 --seq 2048 --steps 5 --variants eager thunder_discover torch_compile

Inductor compiles into a fresh cache directory (a cold compile, as on a new machine) unless
``--warm-inductor-cache`` is given. On a shared machine, Inductor's OpenMP kernels are very
sensitive to other processes competing for the cores (their threads spin at barriers): compare
variants with ``OMP_NUM_THREADS=1``, or on an idle machine.

``--config`` names a LitGPT config (``litgpt.Config.from_name``; weights are random, nothing is
downloaded) with ``--layers`` of its layers; the default, ``llama-tiny``, is thunder's test
config (n_embd 256, 4 heads, 2 query groups).

Prints exactly one JSON object on stdout (``--json-out PATH`` also writes it to PATH after every
variant, so a run cut short keeps what it measured); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

VARIANTS = (
    "eager",
    "thunder_default",
    "thunder_torch_compile",
    "thunder_torch_compile_wait",
    "torch_compile",
    "thunder_discover",
)
DEFAULT_VARIANTS = ("eager", "thunder_default", "thunder_torch_compile", "torch_compile")


def make_model(n_layer: int, config_name: str = "llama-tiny", seq: int = 128, device: str = "cpu", dtype=torch.float32):
    from litgpt import GPT

    if config_name == "llama-tiny":
        from thunder.tests.litgpt_model import Config  # knows the "llama-tiny" config (n_embd 256, 4 heads, GQA 2)
    else:
        from litgpt import Config
    sizes = {} if config_name == "llama-tiny" else {"block_size": seq}  # the tiny config keeps its own
    config = Config.from_name(config_name, n_layer=n_layer, **sizes)
    torch.manual_seed(0)
    with torch.device(device):
        return GPT(config).to(dtype)


def wrap(variant: str, model):
    if variant == "eager":
        return model
    if variant == "torch_compile":
        return torch.compile(model)
    import thunder

    if variant == "thunder_default":
        return thunder.jit(model)
    if variant in ("thunder_torch_compile", "thunder_torch_compile_wait"):
        fusion = "wait" if variant.endswith("_wait") else "background"
        return thunder.jit(model, executors=["torch_compile", *thunder.get_default_executors()], fusion=fusion)
    if variant == "thunder_discover":
        return thunder.jit(model, executors=thunder.discover())
    raise ValueError(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")


def _sync() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def run_variant(variant: str, base, batches, steps: int) -> dict:
    cuda = next(base.parameters()).is_cuda
    model = copy.deepcopy(base)
    model.train()
    fn = wrap(variant, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vocab = base.config.padded_vocab_size

    def step(idx, targets) -> float:
        logits = fn(idx)
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    tiered = hasattr(fn, "_lc_cd")  # a thunder.jit'd model: its programs may be fused in the background
    _sync()
    start = t0 = time.perf_counter()
    first_loss = step(*batches[0])  # .item() waits for the GPU
    first = time.perf_counter() - t0
    loss, fused_after = first_loss, None
    for i in range(steps):
        loss = step(*batches[(i + 1) % len(batches)])
        if tiered and fused_after is None and "unfused" not in _fusion_states(fn):
            fused_after = i + 2
    wall = time.perf_counter() - start
    if tiered:
        import thunder

        thunder.wait_for_fusion(fn)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    times = []
    for i in range(steps):
        _sync()
        t0 = time.perf_counter()
        loss = step(*batches[(i + 1) % len(batches)])
        times.append(time.perf_counter() - t0)
    result = {
        "first_step_s": round(first, 4),
        "wall_s": round(wall, 3),
        "median_step_s": round(statistics.median(times), 5),
        "step_runs_s": [round(t, 5) for t in times],
        "loss_first": round(first_loss, 5),
        "loss_last": round(loss, 5),
    }
    if cuda:
        peak = torch.cuda.max_memory_allocated()
        result["peak_mib"] = round(peak / 2**20, 1)
        result["peak_step_mib"] = round((peak - before) / 2**20, 1)
    if tiered and "not tiered" not in _fusion_states(fn):
        result["fused_after_steps"] = fused_after
    return result


def _fusion_states(fn) -> list[str]:
    import thunder

    return thunder.fusion_states(fn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10, help="timed steps after the first")
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=VARIANTS)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--config", default="llama-tiny", help="a LitGPT config name, e.g. Llama-2-7b-hf")
    parser.add_argument("--json-out", metavar="PATH", help="also write the JSON object to PATH after every variant")
    parser.add_argument(
        "--warm-inductor-cache", action="store_true", help="reuse Inductor's on-disk cache (default: a fresh one)"
    )
    args = parser.parse_args()
    if not args.warm_inductor_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-bench-inductor-")

    try:
        import litgpt  # noqa: F401

        import thunder  # noqa: F401
    except ImportError as e:
        sys.exit(f"{os.path.basename(__file__)}: needs thunder-core and litgpt ({e})")

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit(f"{os.path.basename(__file__)}: --device cuda, but torch {torch.__version__} sees no CUDA device")
    base = make_model(args.layers, args.config, args.seq, args.device, getattr(torch, args.dtype))
    g = torch.Generator().manual_seed(1)
    vocab = base.config.padded_vocab_size
    batches = [
        (
            torch.randint(0, vocab, (args.batch, args.seq), generator=g).to(args.device),
            torch.randint(0, vocab, (args.batch, args.seq), generator=g).to(args.device),
        )
        for _ in range(4)
    ]
    c = base.config
    results: dict = {}
    out = {
        "model": {
            "litgpt_config": args.config,
            "litgpt_llama": {
                "n_layer": c.n_layer,
                "n_embd": c.n_embd,
                "n_head": c.n_head,
                "n_query_groups": c.n_query_groups,
            },
            "batch": [args.batch, args.seq],
            "params": sum(p.numel() for p in base.parameters()),
        },
        "step": f"forward + cross_entropy + backward + AdamW step, {args.dtype}, {args.device}",
        "results": results,
        "torch": torch.__version__,
        "thunder_core": importlib.metadata.version("thunder-core"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads()},
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "inductor_cache": "warm" if args.warm_inductor_cache else "cold",
    }
    for variant in args.variants:
        print(f"{variant} ...", file=sys.stderr, flush=True)
        try:
            results[variant] = run_variant(variant, base, batches, args.steps)
        except Exception as e:  # report and go on with the other variants
            results[variant] = {"error": f"{type(e).__name__}: {e}"}
        if args.device == "cuda":
            torch.cuda.empty_cache()  # the variant's model and optimizer state are gone with run_variant
        print(f"  {results[variant]}", file=sys.stderr, flush=True)
        if "median_step_s" in results.get("eager", {}):
            eager = results["eager"]["median_step_s"]
            for r in results.values():
                if "median_step_s" in r:
                    r["median_vs_eager"] = round(r["median_step_s"] / eager, 3)
        if args.json_out:
            with open(args.json_out, "w") as f:
                f.write(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
