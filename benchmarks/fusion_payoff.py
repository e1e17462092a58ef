"""Where Inductor fusion pays off on this CPU: a chain of k elementwise operations (optionally ending in a
reduction) on N float32 elements, unfused vs fused, in steady state.

The measurements behind the region rule of ``torch_compile`` (docs/extending.md, "Which regions are
compiled"). Per case (k, N, reduction):

- ``eager_us``: the chain in eager PyTorch;
- ``unfused_us``: ``thunder.jit`` with the default executors (one PyTorch kernel per operation);
- ``fused_us``: ``thunder.jit`` with ``torch_compile`` first and ``fusion="wait"``, the region rule's size
  threshold switched off (``min_region_numel=0``) so that every case really is compiled;
- ``fused_over_unfused``: the ratio (below 1: fusion pays);
- ``compile_s``: the wall time of the fused variant's first call (the region's compile, in this process's
  Inductor cache: the first case also pays Dynamo's and Inductor's import).

Times are the best of ``--repeat`` rounds, each the mean of ``--number`` calls (the minimum: on a shared
machine the other rounds measure the other processes). Run it with ``OMP_NUM_THREADS=1`` on a loaded machine:
OpenMP threads that spin at barriers while other processes hold the cores make every variant erratic.

    OMP_NUM_THREADS=1 python benchmarks/fusion_payoff.py
    python benchmarks/fusion_payoff.py --ops 2 4 8 --numel 1024 65536 1048576 --reduction

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import timeit

import torch
from bench_env import import_thunder, machine_info

# the chain's operations, cycled: cheap and transcendental elementwise operations as in activations/norms
_STEPS = (
    lambda t: t * 1.5,
    lambda t: torch.tanh(t),
    lambda t: t + 0.25,
    lambda t: torch.exp(-t),
    lambda t: t * t,
    lambda t: torch.sigmoid(t),
    lambda t: t - 0.5,
    lambda t: torch.abs(t),
)


def make_chain(k: int, reduction: bool):
    """A function of one tensor applying k elementwise operations, then a sum over the last dim if asked."""

    def chain(x):
        for i in range(k):
            x = _STEPS[i % len(_STEPS)](x)
        return x.sum(-1) if reduction else x

    return chain


def time_us(fn, x, number: int, repeat: int) -> float:
    fn(x)
    runs = timeit.repeat(lambda: fn(x), number=number, repeat=repeat)
    return min(runs) / number * 1e6  # the minimum: the least disturbed round on a shared machine


def measure(thunder, k: int, numel: int, reduction: bool, number: int, repeat: int) -> dict:
    from thunder.executors.torch_compile import TorchCompileExecutor

    rows = max(1, numel // 1024)
    x = torch.randn(rows, numel // rows)
    chain = make_chain(k, reduction)
    fusing = TorchCompileExecutor(f"torch_compile_payoff_{k}_{numel}_{int(reduction)}", min_region_numel=0)
    fused = thunder.jit(chain, executors=[fusing, *thunder.get_default_executors()], fusion="wait")
    t0 = time.perf_counter()
    out = fused(x)
    compile_s = time.perf_counter() - t0
    torch.testing.assert_close(out, chain(x))
    unfused = thunder.jit(chain)
    result = {
        "ops": k,
        "numel": numel,
        "reduction": reduction,
        "eager_us": round(time_us(chain, x, number, repeat), 2),
        "unfused_us": round(time_us(unfused, x, number, repeat), 2),
        "fused_us": round(time_us(fused, x, number, repeat), 2),
        "compile_s": round(compile_s, 2),
        "regions": sum(b.sym.executor is fusing for b in thunder.last_traces(fused)[-1].bound_symbols),
    }
    result["fused_over_unfused"] = round(result["fused_us"] / result["unfused_us"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--numel", type=int, nargs="+", default=[1024, 16384, 131072, 1048576])
    parser.add_argument("--reduction", action="store_true", help="end each chain with a sum over the last dim")
    parser.add_argument("--number", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--warm-inductor-cache", action="store_true", help="reuse Inductor's on-disk cache")
    args = parser.parse_args()
    if not args.warm_inductor_cache:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="thunder-bench-inductor-")
    thunder = import_thunder(__file__)
    cases = []
    for numel in args.numel:
        for k in args.ops:
            try:
                cases.append(measure(thunder, k, numel, args.reduction, args.number, args.repeat))
            except Exception as e:  # noqa: BLE001 - reported in the JSON, the other cases still run
                cases.append(
                    {"ops": k, "numel": numel, "reduction": args.reduction, "error": f"{type(e).__name__}: {e}"}
                )
    print(json.dumps({"benchmark": "fusion_payoff", "machine": machine_info(), "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
