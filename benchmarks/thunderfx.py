"""Training-step time of a LitGPT model with a graph break: eager, thunderfx, torch.compile (Inductor).

The model is LitGPT's Llama-style ``GPT`` built from a small config with random weights (nothing
is downloaded). A forward hook on one transformer block records the block's mean activation with
``.item()``, the kind of monitoring code that breaks a graph: ``thunder.jit`` cannot trace it
(it needs the value while tracing), Dynamo splits the program there. A step is forward,
cross-entropy loss and backward (no optimizer update: it is the same for every variant).

For each variant: ``first_call_s`` (the first step of a freshly compiled model: Dynamo, Thunder or
Inductor compilation included) and ``step_median_s`` / ``step_min_s`` over ``--steps`` further
steps, timed round-robin across the variants (one step of each per round, so that load on a
shared machine hits them alike); ``max_abs_diff_loss`` / ``max_abs_diff_grad`` of the first step
against eager. ``thunder_jit`` runs the same
model WITHOUT the hook (``thunder.jit`` cannot run the hook; its error is reported instead).

    python benchmarks/thunderfx.py                      # 4 layers, batch 2 x 128 tokens
    python benchmarks/thunderfx.py --layers 2 --steps 5
    python benchmarks/thunderfx.py --no-inductor        # skip torch.compile's (slow) first call
    python benchmarks/thunderfx.py --models all         # HF Llama, Mixtral, Qwen2-MoE, Longformer, ELECTRA
                                                        # and LitGPT Mixtral through backend="thunder"
                                                        # (see thunderfx_models.py)
    OMP_NUM_THREADS=1 python benchmarks/thunderfx.py --models mixtral --clock cpu  # CPU time per step
    python benchmarks/thunderfx.py --models all --smoke # tiny sizes, no Inductor; status 1 on a
                                                        # failure, a mismatch or a steady-state compile (CI)

Prints exactly one JSON object on stdout; progress goes to stderr.
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
import time

import torch


def log(*args) -> None:
    print(*args, file=sys.stderr, flush=True)


def import_or_exit():
    try:
        import thunder
        from thunder.dynamo import thunderfx
        from thunder.tests.litgpt_model import GPT, Config
    except ImportError as e:
        sys.exit(
            f"{os.path.basename(__file__)}: cannot import thunder or litgpt ({e}).\n"
            "Install them from the repository root with: "
            'python -m pip install -c constraints.txt -e "packages/thunder-core[test]"'
        )
    return thunder, thunderfx, GPT, Config


def add_monitoring_hook(model, block: int, record: dict) -> None:
    # (appending to a list would make Dynamo guard on the list's length and recompile every step)
    def hook(module, args, output):
        record["mean_activation"] = output.detach().abs().mean().item()  # a graph break

    model.transformer.h[block].register_forward_hook(hook)


def step(model, tokens, targets):
    logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    loss.backward()
    return loss


def first_step(name, model, call, tokens, targets, reference=None) -> tuple[dict, tuple]:
    """Runs the first (compiling) step; returns its time and, against ``reference``, the differences."""
    for p in model.parameters():
        p.grad = None
    t0 = time.perf_counter()
    loss = step(call, tokens, targets)
    result = {"first_call_s": round(time.perf_counter() - t0, 4)}
    grads = [p.grad.clone() for p in model.parameters()]
    if reference is not None:
        ref_loss, ref_grads = reference
        result["max_abs_diff_loss"] = float((loss.detach() - ref_loss).abs())
        result["max_abs_diff_grad"] = max(float((g - r).abs().max()) for g, r in zip(grads, ref_grads))
    log(f"{name}: {result}")
    return result, (loss.detach(), grads)


def time_steps(variants: dict, tokens, targets, steps: int) -> dict[str, list[float]]:
    """Times ``steps`` steps of every variant, round-robin (one step of each per round), so that
    load changes on a shared machine affect them alike."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(steps):
        for name, (model, call) in variants.items():
            for p in model.parameters():
                p.grad = None
            t0 = time.perf_counter()
            step(call, tokens, targets)
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile with Inductor")
    parser.add_argument("--models", nargs="+", help="run the model sweep instead: names or 'all' (thunderfx_models.py)")
    parser.add_argument("--smoke", action="store_true", help="with --models: tiny sizes, 2 steps, no Inductor")
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="with --models: time steps by wall clock or by the process's CPU time (steadier on a shared machine)",
    )
    args = parser.parse_args()
    if args.models:
        sys.exit(run_models(args))

    thunder, thunderfx, GPT, Config = import_or_exit()
    torch.manual_seed(0)
    config = Config.from_name("llama-tiny", n_layer=args.layers)
    base = GPT(config)
    tokens = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    targets = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    hook_block = min(1, args.layers - 1)

    def fresh(with_hook: bool):
        model = copy.deepcopy(base)
        if with_hook:
            add_monitoring_hook(model, hook_block, {"mean_activation": 0.0})
        return model

    results: dict = {}
    variants: dict = {}
    model = fresh(True)
    results["eager"], reference = first_step("eager", model, model, tokens, targets)
    variants["eager"] = (model, model)

    torch._dynamo.reset()
    model = fresh(True)
    compiled = thunderfx(model)
    results["thunderfx"], _ = first_step("thunderfx", model, compiled, tokens, targets, reference)
    variants["thunderfx"] = (model, compiled)
    results["thunderfx"]["graph_breaks"] = len(compiled.graph_breaks)
    results["thunderfx"]["dynamo_graphs"] = len(compiled.subgraph_infos)
    regions = [r for info in compiled.subgraph_infos for r in info.regions]
    results["thunderfx"]["regions"] = {k: sum(r.kind == k for r in regions) for k in ("thunder", "fallback", "python")}
    log(compiled.report())

    if not args.no_inductor:
        model = fresh(True)
        # a separate Dynamo cache entry: the model object differs, so thunderfx's graphs stay in use
        compiled = torch.compile(model)
        name = "torch_compile_inductor"
        results[name], _ = first_step(name, model, compiled, tokens, targets, reference)
        variants[name] = (model, compiled)

    model = fresh(True)
    try:
        step(thunder.jit(model), tokens, targets)
        results["thunder_jit_with_hook"] = "ran"
    except Exception as e:
        results["thunder_jit_with_hook"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    model = fresh(False)
    jitted = thunder.jit(model)
    name = "thunder_jit_without_hook"
    results[name], _ = first_step(name, model, jitted, tokens, targets, reference)
    variants[name] = (model, jitted)

    fx = variants["thunderfx"][1]
    timed = time_steps(variants, tokens, targets, args.steps)
    # a recompilation while timing would show here (and in the median)
    results["thunderfx"]["dynamo_graphs_after_timing"] = len(fx.subgraph_infos)
    for name, times in timed.items():
        results[name]["step_median_s"] = round(statistics.median(times), 5)
        results[name]["step_min_s"] = round(min(times), 5)
        log(f"{name}: median {statistics.median(times):.4f} s, min {min(times):.4f} s")

    results["config"] = {
        "model": f"LitGPT llama-tiny, n_layer={args.layers}, n_embd={config.n_embd}, vocab={config.padded_vocab_size}",
        "tokens": [args.batch, args.seq],
        "graph_break": f"forward hook on transformer.h[{hook_block}] calling .item()",
        "step": "forward + cross_entropy + backward",
        "steps_timed": args.steps,
        "timing": "round-robin over variants, seconds per step",
    }
    results["torch"] = torch.__version__
    results["thunder_core"] = _version("thunder-core")
    results["machine"] = {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
    }
    print(json.dumps(results, indent=2))


def run_models(args) -> int:
    """The ``--models`` sweep (thunderfx_models.py): prints its JSON, returns the exit status."""
    import thunderfx_models

    names = list(thunderfx_models.MODELS) if "all" in args.models else args.models
    unknown = [n for n in names if n not in thunderfx_models.MODELS]
    if unknown:
        sys.exit(f"--models: unknown {unknown}; choose from {list(thunderfx_models.MODELS)} or 'all'")
    results: dict = {}
    for name in names:
        try:
            results[name] = thunderfx_models.run_model(
                name,
                smoke=args.smoke,
                steps=2 if args.smoke else args.steps,
                warmup=1 if args.smoke else 2,
                inductor=not (args.smoke or args.no_inductor),
                log=log,
                clock=time.process_time if args.clock == "cpu" else time.perf_counter,
            )
        except ModuleNotFoundError as e:  # an optional model package (litgpt) that is not installed
            results[name] = {"skipped": f"{e.name} is not installed"}
            log(f"{name}: skipped ({e.name} is not installed)")
        except Exception as e:
            results[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
            log(f"{name}: {results[name]['error']}")
    failures = thunderfx_models.smoke_failures(results)
    out = {
        "models": results,
        "smoke": args.smoke,
        "clock": args.clock,
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "thunder_core": _version("thunder-core"),
        "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads()},
        "failures": failures,
    }
    print(json.dumps(out, indent=2))
    return 1 if (args.smoke and failures) else 0


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
