"""Vision models' training step on CPU: eager vs thunder (default executors) vs torch.compile.

timm models built from configs with random weights (``thunder.tests.vision_models``; nothing is
downloaded), batch 2, train mode. Per model: the first call's time (trace + compile + run, thunder
and torch.compile), and the median fwd+bwd step time of each variant, with the ratios to eager and thunder's to
torch.compile's (Inductor); each compiler's compile time (its first call less one steady step) is
reported apart from its steps.
The variants' steps alternate, each round starting with the next variant (eager, thunder, torch.compile;
thunder, torch.compile, eager; ...), so the machine's noise and the order fall on all of them alike;
``--control`` adds a second eager copy whose ratio to eager is the measurement's noise floor. Each
model's outputs and gradients are checked against eager first.
``--cpu-time`` measures the work of a step rather than its wall time: one intra-op thread, and the
process's CPU time (``time.process_time``) instead of the clock, so that other processes on a shared
machine do not enter the figure (they still share its caches). ``--stat min`` reports each variant's
fastest step instead of the median. ``--fusion`` adds thunder with the ``torch_compile`` executor's
(Inductor) regions, compiled before its first step returns (``fusion="wait"``).
Prints one JSON object.

    python benchmarks/vision.py                       # every model, with torch.compile (minutes)
    python benchmarks/vision.py --smoke               # two small models, no torch.compile (CI: smoke.py vision)
    python benchmarks/vision.py --models resnet18 maxvit --steps 20 --no-torch-compile
    python benchmarks/vision.py --steps 15 --control --cpu-time --fusion   # on a shared machine
"""

from __future__ import annotations

import argparse
import copy
import json
import resource
import statistics
import sys
import time

from bench_env import settle_fusion


def _step(model, x):
    out = model(x)
    out.square().mean().backward()
    for p in model.parameters():
        p.grad = None
    return out


_clock = time.perf_counter  # --cpu-time: time.process_time


def _timed(fn, clock=None) -> float:
    clock = clock or _clock
    t0 = clock()
    fn()
    return clock() - t0


def _first_call(fn) -> float:
    # what a user waits for: wall time, also under --cpu-time (Inductor compiles in worker processes)
    return _timed(fn, time.perf_counter)


def _check(name, eager_model, model, x, perturbed_model=None) -> None:
    """``model``'s output and gradients against ``eager_model``'s (same weights). ``perturbed_model`` (a third copy):
    eager's gradients for an input moved by a few float32 roundings (2**-19 relative), whose distance from eager's
    own measures how much float32 rounding moves this network's gradients (the tolerance grows with it)."""
    import torch

    import thunder

    channels_last = any("memory_format=torch.channels_last" in str(t) for t in thunder.last_traces(model))
    xe = x
    layout_spread = {}
    if channels_last:
        # thunder runs this network channels-last (with fusion: thunder.transforms.conv_layout), whose float32
        # gradients sum in another order: the reference is eager run channels-last too. Eager's own channels-last
        # gradients can be the inaccurate ones (tv_densenet121: a 3x3 weight's gradient 0.0027 from float64's, where
        # eager contiguous, thunder's and torch.compile's are within 2e-6): the tolerance grows with the distance
        # between eager's two layouts
        contiguous_model = copy.deepcopy(eager_model)
        contiguous_model(x).square().mean().backward()
        eager_model = eager_model.to(memory_format=torch.channels_last)
        xe = x.contiguous(memory_format=torch.channels_last)
    out_e, out = eager_model(xe), model(x)
    torch.testing.assert_close(out, out_e, atol=1e-3, rtol=1e-3, msg=lambda m: f"{name}: outputs differ: {m}")
    out_e.square().mean().backward()
    out.square().mean().backward()
    if channels_last:
        eager_params = dict(eager_model.named_parameters())
        layout_spread = {
            n: (p.grad - eager_params[n].grad).abs().max()
            for n, p in contiguous_model.named_parameters()
            if p.grad is not None
        }
    spread = {}
    if perturbed_model is not None:
        # some networks' gradients are ill-conditioned at random weights and batch 2 (a BatchNorm over a nearly
        # constant channel): tv_regnet_y_400mf's stem weight gradient moves by 0.2 (of 8.7) when its stem's output
        # moves by a few float32 roundings, so any other order of float32 sums (a fused kernel's) moves it as much
        # (the largest move over a few perturbations, whose effect jumps: tv_mobilenet_v2's features.16.conv.1.1.bias
        # gradient moves by 4e-7 with the first, by 8e-5 (of 7e-4) with the next three, as with a fused program's sums)
        if channels_last:
            perturbed_model = perturbed_model.to(memory_format=torch.channels_last)
        eager_params = dict(eager_model.named_parameters())
        for seed in range(3):
            rounding = torch.rand(xe.shape, generator=torch.Generator().manual_seed(seed)).sub_(0.5).mul_(2**-18)
            perturbed_model(xe * (1 + rounding)).square().mean().backward()
            for n, p in perturbed_model.named_parameters():
                if p.grad is not None:
                    moved = (p.grad - eager_params[n].grad).abs().max()
                    spread[n] = torch.maximum(spread[n], moved) if n in spread else moved
                p.grad = None
    for (pname, pe), p in zip(eager_model.named_parameters(), model.parameters()):
        if pe.grad is not None:
            # a fused reduction sums in another order: its float32 error scales with the summed terms, which a
            # BatchNorm bias's gradient cancels to a small result (mobilenetv2: 0.09 from terms of +-100)
            atol = max(
                1e-3 * max(1.0, float(pe.grad.abs().max())),
                4 * float(spread.get(pname, 0.0)),
                2 * float(layout_spread.get(pname, 0.0)),
            )
            torch.testing.assert_close(
                p.grad, pe.grad, atol=atol, rtol=1e-2, msg=lambda m, pname=pname: f"{name}: grad of {pname}: {m}"
            )
        p.grad = pe.grad = None


def bench_model(
    name: str,
    steps: int,
    batch: int,
    use_torch_compile: bool,
    control: bool = False,
    stat=statistics.median,
    fusion: bool = False,
    recompute_reshapes: bool = False,
) -> dict:
    import torch

    import thunder
    from thunder.tests.vision_models import create, example_input

    x = example_input(name, batch)
    eager = create(name)
    variants = {"eager": eager}
    first_call = {}
    jmodel = thunder.jit(create(name))
    first_call["thunder"] = _first_call(lambda: _step(jmodel, x))
    variants["thunder"] = jmodel
    if fusion:  # thunder with Inductor regions, compiled before the first call returns
        fmodel = thunder.jit(create(name), executors=["torch_compile", *thunder.get_default_executors()], fusion="wait")
        first_call["thunder_fusion"] = _first_call(lambda: _step(fmodel, x))
        variants["thunder_fusion"] = fmodel
    if recompute_reshapes:  # elementwise values the backward reads saved, as eager saves them
        smodel = thunder.jit(create(name), recompute="reshapes")
        first_call["thunder_saved"] = _first_call(lambda: _step(smodel, x))
        variants["thunder_saved"] = smodel
    if use_torch_compile:
        cmodel = torch.compile(create(name))
        first_call["torch_compile"] = _first_call(lambda: _step(cmodel, x))
        variants["torch_compile"] = cmodel
    # the check runs on a fresh eager model and the compiled one (both start from the same weights)
    _check(name, create(name), jmodel, x)
    if fusion:
        _check(name, create(name), fmodel, x, perturbed_model=create(name))
    for m in variants.values():  # warm-up
        _step(m, x)
    if fusion:  # the fused regions' first calls queue graphs for the input layouts they met: wait for them
        settle_fusion(thunder, fmodel, lambda: _step(fmodel, x))
    if control:  # a second eager copy: its ratio to eager is the benchmark's own noise floor
        variants["eager_control"] = create(name)
        _step(variants["eager_control"], x)
    times: dict[str, list[float]] = {k: [] for k in variants}
    # minor page faults during each variant's steps: memory the C library gave back and took again (see
    # thunder/executors/host_memory.py), a cost of the allocator's state that the step time alone does not explain
    faults = dict.fromkeys(variants, 0)
    order = list(variants)
    for r in range(steps):
        # each round starts with the next variant, so that no variant always runs right after another
        for k in order[r % len(order) :] + order[: r % len(order)]:
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            times[k].append(_timed(lambda m=variants[k]: _step(m, x)))
            faults[k] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    med = {k: stat(v) for k, v in times.items()}
    result = {
        "eager_step_ms": round(med["eager"] * 1e3, 2),
        "thunder_step_ms": round(med["thunder"] * 1e3, 2),
        "thunder_vs_eager": round(med["thunder"] / med["eager"], 3),
        "thunder_first_call_s": round(first_call["thunder"], 3),
        # the first call less one steady step: tracing, transforms and building the program
        "thunder_compile_s": round(max(first_call["thunder"] - med["thunder"], 0.0), 3),
        "page_faults_per_step": {k: round(n / steps) for k, n in faults.items()},
    }
    if fusion:
        result.update(
            thunder_fusion_step_ms=round(med["thunder_fusion"] * 1e3, 2),
            thunder_fusion_vs_eager=round(med["thunder_fusion"] / med["eager"], 3),
            thunder_fusion_first_call_s=round(first_call["thunder_fusion"], 3),
        )
        if use_torch_compile:
            result["thunder_fusion_vs_torch_compile"] = round(med["thunder_fusion"] / med["torch_compile"], 3)
    if recompute_reshapes:
        result["thunder_saved_vs_eager"] = round(med["thunder_saved"] / med["eager"], 3)
    if control:
        result["eager_control_vs_eager"] = round(med["eager_control"] / med["eager"], 3)
    if use_torch_compile:
        result.update(
            torch_compile_step_ms=round(med["torch_compile"] * 1e3, 2),
            torch_compile_vs_eager=round(med["torch_compile"] / med["eager"], 3),
            thunder_vs_torch_compile=round(med["thunder"] / med["torch_compile"], 3),
            torch_compile_first_call_s=round(first_call["torch_compile"], 3),
            # Inductor's compile time, apart from its steps: the first call less one steady step
            torch_compile_compile_s=round(max(first_call["torch_compile"] - med["torch_compile"], 0.0), 3),
        )
    return result


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="*", help="names from thunder.tests.vision_models.MODELS (default: all)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per variant (--stat of them reported)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--no-torch-compile", action="store_true", help="eager and thunder only")
    parser.add_argument("--smoke", action="store_true", help="two small models, 3 steps, no torch.compile")
    parser.add_argument(
        "--control", action="store_true", help="also time a second eager copy: its ratio to eager is the noise floor"
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="one intra-op thread and process CPU time instead of wall time (the work of a step; robust to load)",
    )
    parser.add_argument(
        "--fusion",
        action="store_true",
        help="also time thunder with the torch_compile (Inductor) executor's regions, compiled before the first step",
    )
    parser.add_argument(
        "--recompute-reshapes",
        action="store_true",
        help="also time thunder.jit(recompute='reshapes') (elementwise values saved, not recomputed in the backward)",
    )
    parser.add_argument(
        "--stat", choices=["median", "min"], default="median", help="per-variant statistic of the steps"
    )
    args = parser.parse_args(argv)
    global _clock
    if args.cpu_time:
        import torch

        torch.set_num_threads(1)
        _clock = time.process_time
    stat = min if args.stat == "min" else statistics.median
    try:
        import thunder  # noqa: F401
        from thunder.tests.vision_models import MODELS, SMOKE_MODELS, import_timm

        import_timm()
    except ImportError as e:
        sys.exit(f"benchmarks/vision.py needs thunder and timm installed: {e}")
    names = list(SMOKE_MODELS) if args.smoke else (args.models or list(MODELS))
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        sys.exit(f"unknown model(s) {unknown}; known: {sorted(MODELS)}")
    steps = 3 if args.smoke else args.steps
    use_tc = not (args.no_torch_compile or args.smoke)
    results = {}
    for name in names:
        print(f"{name}...", file=sys.stderr, flush=True)
        results[name] = bench_model(
            name, steps, args.batch, use_tc, args.control, stat, args.fusion, args.recompute_reshapes
        )
        print(f"  {results[name]}", file=sys.stderr, flush=True)
    ratios = [r["thunder_vs_eager"] for r in results.values()]
    summary = {
        "median_thunder_vs_eager": round(statistics.median(ratios), 3),
        "max_thunder_vs_eager": max(ratios),
    }
    if args.control:
        controls = [r["eager_control_vs_eager"] for r in results.values()]
        summary["control_range"] = [min(controls), max(controls)]
    if args.fusion:
        summary["median_thunder_fusion_vs_eager"] = round(
            statistics.median(r["thunder_fusion_vs_eager"] for r in results.values()), 3
        )
    if use_tc:
        summary["median_torch_compile_vs_eager"] = round(
            statistics.median(r["torch_compile_vs_eager"] for r in results.values()), 3
        )
    import torch

    print(
        json.dumps(
            {
                "benchmark": "vision",
                "torch": torch.__version__,
                "batch": args.batch,
                "steps": steps,
                "clock": "process_time, 1 thread" if args.cpu_time else "perf_counter",
                "stat": args.stat,
                "models": results,
                **summary,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
