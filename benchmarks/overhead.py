"""Per-call overhead of thunder.jit on tiny CPU functions, next to eager PyTorch and torch.compile.

The tensors have two elements, so the time is almost all framework overhead (argument checks,
cache lookup, dispatch), not arithmetic.

    python benchmarks/overhead.py                      # eager, thunder.jit and torch.compile
    python benchmarks/overhead.py --no-torch-compile   # skip torch.compile (its first call takes a while)
    python benchmarks/overhead.py --no-torch-compile --no-prologue   # the tiny functions only

Besides the tiny functions, it times the prologue (the generated input checks that run before the
program on every call) of two modules, with the program itself replaced by a no-op so that only
the checks and the unpacking of parameters count:

- ``litgpt_prologue``: a 4-layer LitGPT Llama (thunder.tests.litgpt_model's "llama-tiny" with
  n_embd 64), input of shape [1, 16];
- ``many_tensors_prologue``: a stack of 121 Linear + BatchNorm1d blocks in eval mode (728
  parameters and buffers, about as many as DenseNet-121's 727), where the per-tensor cost of the prologue dominates; the
  whole call is timed too, next to eager.

Each timing is timeit.repeat(number=N, repeat=R) on a warmed-up callable; the reported figure
is the MINIMUM over the R repeats of (repeat time / N), in microseconds per call: the least
noisy estimate on a shared machine. The median over repeats is reported beside it.

Prints exactly one JSON object on stdout; progress goes to stderr.
"""

import argparse
import json
import statistics
import sys
import timeit

import torch
from bench_env import import_thunder, machine_info, package_version


def a_plus_b(a, b):
    return a + b


def three_ops(a, b):
    return torch.relu(a * b + a)


FUNCTIONS = {"a_plus_b": a_plus_b, "three_ops": three_ops}


def litgpt_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """A 4-layer LitGPT Llama with n_embd 64 and an input of shape [1, 16] (None if litgpt is missing)."""
    try:
        import litgpt

        from thunder.tests.litgpt_model import configs
    except ImportError as e:
        print(f"[overhead] litgpt_prologue skipped: {e}", file=sys.stderr)
        return None
    base = next(c for c in configs if c["name"] == "llama-tiny")
    torch.manual_seed(0)
    model = litgpt.GPT(litgpt.Config(**{**base, "n_layer": 4, "n_embd": 64, "intermediate_size": 172}))
    return model, torch.randint(0, base["vocab_size"], (1, 16))


def many_tensors_model() -> tuple[torch.nn.Module, torch.Tensor]:
    """121 Linear (no bias) + BatchNorm1d blocks and a Linear: 728 parameters and buffers, on a tiny input."""
    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.BatchNorm1d(4)) for _ in range(121)]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(4, 2))
    model.eval()
    return model, torch.randn(2, 4)


def prologue_us(thunder, jitted, x, number: int, repeat: int) -> dict:
    """The most recently used prologue of ``jitted`` on ``x``, its program replaced by a no-op."""
    entry = thunder.compile_data(jitted).cache.mru
    prologue = entry.prologue
    namespace = prologue.__globals__
    program = namespace["computation"]
    namespace["computation"] = lambda *args: None
    try:
        if prologue(x) is not None:  # MISS: the checks reject the input, the figure would mean nothing
            raise RuntimeError("the prologue does not accept the input it was compiled for")
        return time_per_call_us(prologue, (x,), number, repeat)
    finally:
        namespace["computation"] = program


def module_entry(thunder, model, x, args, *, whole_call: bool) -> dict:
    jitted = thunder.jit(model)
    torch.testing.assert_close(jitted(x), model(x))
    n_tensors = len(list(model.parameters())) + len(list(model.buffers()))
    entry = {"tensors": n_tensors}
    number = max(1, args.number // 20)
    t = prologue_us(thunder, jitted, x, number, args.repeat)
    entry["prologue_us"], entry["prologue_median_us"] = t["min"], t["median"]
    entry["prologue_ns_per_tensor"] = t["min"] * 1000 / n_tensors
    if whole_call:  # (a call runs 250 small modules: milliseconds, not microseconds)
        for variant, fn in (("eager", model), ("thunder", jitted)):
            t = time_per_call_us(fn, (x,), max(1, args.number // 400), args.repeat, warmup=3)
            entry[f"{variant}_us"], entry[f"{variant}_median_us"] = t["min"], t["median"]
        entry["thunder_over_eager"] = entry["thunder_us"] / entry["eager_us"]
    return entry


def time_per_call_us(fn, args, number: int, repeat: int, warmup: int = 100) -> dict:
    for _ in range(warmup):  # warm-up: the first calls trace/compile, later ones fill caches
        fn(*args)
    totals = timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)
    per_call_us = [t / number * 1e6 for t in totals]
    return {"min": min(per_call_us), "median": statistics.median(per_call_us)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-prologue", action="store_true", help="skip the module prologue timings")
    parser.add_argument("--number", type=int, default=20000, help="calls per timing repeat (default 20000)")
    parser.add_argument("--repeat", type=int, default=7, help="timing repeats (default 7)")
    args = parser.parse_args()

    thunder = import_thunder(__file__)
    a = torch.randn(2)
    b = torch.randn(2)

    result = {}
    for name, fn in FUNCTIONS.items():
        variants = {"eager": fn, "thunder": thunder.jit(fn)}
        if not args.no_torch_compile:
            variants["torch_compile"] = torch.compile(fn)

        expected = fn(a, b)
        entry = {}
        for variant, compiled in variants.items():
            print(f"[overhead] {name}: {variant} ...", file=sys.stderr, flush=True)
            torch.testing.assert_close(compiled(a, b), expected)  # a wrong result is not worth timing
            t = time_per_call_us(compiled, (a, b), args.number, args.repeat)
            entry[f"{variant}_us"] = t["min"]
            entry[f"{variant}_median_us"] = t["median"]
        entry["thunder_over_eager"] = entry["thunder_us"] / entry["eager_us"]
        if "torch_compile_us" in entry:
            entry["torch_compile_over_eager"] = entry["torch_compile_us"] / entry["eager_us"]
        result[name] = entry

    if not args.no_prologue:
        litgpt = litgpt_model()
        if litgpt is not None:
            print("[overhead] litgpt_prologue ...", file=sys.stderr, flush=True)
            result["litgpt_prologue"] = module_entry(thunder, *litgpt, args, whole_call=False)
        print("[overhead] many_tensors_prologue ...", file=sys.stderr, flush=True)
        result["many_tensors_prologue"] = module_entry(thunder, *many_tensors_model(), args, whole_call=True)

    result["timing"] = f"min over {args.repeat} repeats of {args.number} calls, microseconds per call"
    result["torch"] = torch.__version__
    result["thunder_core"] = package_version("thunder-core")
    result["machine"] = machine_info()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
