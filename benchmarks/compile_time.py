"""First-call (trace + transform + compile + run) time of thunder.jit, and how it grows with depth.

Measures, on the CPU in float32:
  (a) LLaMAMLP (n_embd 256, intermediate 688) on an input of shape (2, 128, 256);
  (b) LitGPT Llama-style GPT models (from the `litgpt` package, random weights) with
      n_layer = 1, 2, 4, 8 on a (2, 128) batch of token ids.

For each model: `first_call_s` is the median over --repeats runs of the first call of a FRESH
`thunder.jit(model)`; `second_call_s` is the next call on the same compiled model (cache hit);
`eager_s` is the median of --eager-calls eager calls. For (b) a least-squares line
first_call_s = intercept + slope * n_layer and the ratio time(8 layers) / time(1 layer) say how
compile time scales. Before measuring, one throwaway thunder.jit of `a + b` pays the one-time
costs of the process (lazy imports, executor discovery).

By default the model runs under torch.no_grad() with parameters not requiring grad (inference).
--grad leaves requires_grad on and grad mode enabled, so the first call also builds the backward.

    python benchmarks/compile_time.py
    python benchmarks/compile_time.py --layers 1 2 4 --repeats 1 --grad

Prints exactly one JSON object on stdout; progress goes to stderr. litgpt is a test dependency
of thunder-core; to install it on its own: python -m pip install -c constraints.txt litgpt==0.5.13
"""

import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from bench_env import import_thunder, machine_info, package_version


class LLaMAMLP(nn.Module):
    def __init__(self, n_embd: int, intermediate_size: int) -> None:
        super().__init__()
        self.fc_1 = nn.Linear(n_embd, intermediate_size, bias=False)
        self.fc_2 = nn.Linear(n_embd, intermediate_size, bias=False)
        self.proj = nn.Linear(intermediate_size, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.silu(self.fc_1(x)) * self.fc_2(x))


def litgpt_llama_config(n_layer: int, n_query_groups: int) -> dict:
    """thunder.tests.litgpt_model's "llama-tiny" (n_embd 256, 4 heads, RMSNorm, LLaMAMLP) at the given depth."""
    from thunder.tests.litgpt_model import configs

    base = next(c for c in configs if c["name"] == "llama-tiny")
    return {**base, "n_layer": n_layer, "n_query_groups": n_query_groups}


def import_litgpt():
    try:
        import litgpt
    except ImportError as e:
        sys.exit(
            f"{os.path.basename(__file__)}: cannot import litgpt ({e}).\n"
            "Install it with: python -m pip install -c constraints.txt litgpt==0.5.13 "
            "(or pass --no-litgpt)"
        )
    return litgpt


def log(message: str) -> None:
    print(f"[compile_time] {message}", file=sys.stderr, flush=True)


def timed(fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def measure(thunder, model: nn.Module, x: torch.Tensor, *, repeats: int, eager_calls: int) -> dict:
    """First-call, second-call and eager seconds for `model(x)`."""
    expected = model(x)  # also warms up eager
    eager_s = statistics.median(timed(model, x)[1] for _ in range(eager_calls))

    first_calls, second_calls = [], []
    for _ in range(repeats):
        jmodel = thunder.jit(model)
        actual, first = timed(jmodel, x)
        _, second = timed(jmodel, x)
        first_calls.append(first)
        second_calls.append(second)

    return {
        "first_call_s": statistics.median(first_calls),
        "first_call_runs_s": first_calls,
        "second_call_s": statistics.median(second_calls),
        "eager_s": eager_s,
        "max_abs_diff": (actual - expected).abs().max().item(),
    }


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of ys against xs."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
    return slope, mean_y - slope * mean_x


def prepare(model: nn.Module, grad: bool) -> nn.Module:
    model.eval()
    model.requires_grad_(grad)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, nargs="+", default=[1, 2, 4, 8], help="LitGPT n_layer values")
    parser.add_argument("--n-query-groups", type=int, default=2, help="LitGPT n_query_groups (4 = MHA, 2 = GQA)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence (at most 256)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh thunder.jit runs per model (default 3)")
    parser.add_argument("--eager-calls", type=int, default=5, help="eager calls to take the median of")
    parser.add_argument("--grad", action="store_true", help="keep requires_grad and grad mode on")
    parser.add_argument("--no-mlp", action="store_true", help="skip the LLaMAMLP measurement")
    parser.add_argument("--no-litgpt", action="store_true", help="skip the LitGPT measurements")
    args = parser.parse_args()

    thunder = import_thunder(__file__)
    litgpt = None if args.no_litgpt else import_litgpt()
    torch.manual_seed(0)
    result = {"grad": args.grad}
    grad_mode = contextlib.nullcontext() if args.grad else torch.no_grad()

    with grad_mode:
        log("warm-up: thunder.jit(a + b)")
        thunder.jit(lambda a, b: a + b)(torch.ones(2), torch.ones(2))

        if not args.no_mlp:
            log("LLaMAMLP(256, 688) on (2, 128, 256)")
            mlp = prepare(LLaMAMLP(256, 688), args.grad)
            x = torch.randn(2, 128, 256)
            result["llama_mlp"] = {
                "n_embd": 256,
                "intermediate_size": 688,
                "input_shape": list(x.shape),
                **measure(thunder, mlp, x, repeats=args.repeats, eager_calls=args.eager_calls),
            }

        if litgpt is not None:
            idx = torch.randint(0, 1024, (args.batch, args.seq))
            per_layer = {}
            for n_layer in args.layers:
                log(f"LitGPT Llama, n_layer={n_layer}, input {tuple(idx.shape)}")
                config = litgpt.Config(**litgpt_llama_config(n_layer, args.n_query_groups))
                model = prepare(litgpt.GPT(config), args.grad)
                per_layer[str(n_layer)] = measure(
                    thunder, model, idx, repeats=args.repeats, eager_calls=args.eager_calls
                )
                del model

            litgpt_result = {
                "config": {**litgpt_llama_config(0, args.n_query_groups), "n_layer": args.layers},
                "input_shape": list(idx.shape),
                "layers": per_layer,
            }
            if len(args.layers) >= 2:
                first = [per_layer[str(n)]["first_call_s"] for n in args.layers]
                slope, intercept = linear_fit([float(n) for n in args.layers], first)
                lo, hi = min(args.layers), max(args.layers)
                litgpt_result["fit"] = {
                    "first_call_slope_s_per_layer": slope,
                    "first_call_intercept_s": intercept,
                    f"first_call_ratio_{hi}_over_{lo}": per_layer[str(hi)]["first_call_s"]
                    / per_layer[str(lo)]["first_call_s"],
                }
            result["litgpt_llama"] = litgpt_result

    result["torch"] = torch.__version__
    result["thunder_core"] = package_version("thunder-core")
    result["litgpt"] = None if litgpt is None else package_version("litgpt")
    result["machine"] = machine_info()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
