"""Per-call overhead of thunder.jit on tiny CPU functions, next to eager PyTorch and torch.compile.

The tensors have two elements, so the time is almost all framework overhead (argument checks,
cache lookup, dispatch), not arithmetic.

    python benchmarks/overhead.py                      # eager, thunder.jit and torch.compile
    python benchmarks/overhead.py --no-torch-compile   # skip torch.compile (its first call takes a while)

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


def time_per_call_us(fn, args, number: int, repeat: int) -> dict:
    for _ in range(100):  # warm-up: the first calls trace/compile, later ones fill caches
        fn(*args)
    totals = timeit.repeat(lambda: fn(*args), number=number, repeat=repeat)
    per_call_us = [t / number * 1e6 for t in totals]
    return {"min": min(per_call_us), "median": statistics.median(per_call_us)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
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

    result["timing"] = f"min over {args.repeat} repeats of {args.number} calls, microseconds per call"
    result["torch"] = torch.__version__
    result["thunder_core"] = package_version("thunder-core")
    result["machine"] = machine_info()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
