"""Where a LitGPT training step spends its GPU time, per variant: the kernels torch.profiler records.

Reuses ``benchmarks/executors_training.py`` (model, variants, step). For each variant: two warm-up
steps, then ``--steps`` profiled steps; prints one JSON object with, per variant, the kernels'
total device time and launch count per step, and the ``--top`` kernels by device time. Explains a
step-time gap that the benchmark only measures (e.g. thunder.discover() vs eager on a GPU).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from executors_training import VARIANTS, make_model, wrap  # noqa: E402


def profile_variant(variant: str, base, batch, steps: int, top: int) -> dict:
    import copy

    model = copy.deepcopy(base)
    fn = wrap(variant, model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    vocab = base.config.padded_vocab_size
    idx, targets = batch

    def step():
        loss = F.cross_entropy(fn(idx).reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict[str, list[float]] = {}
    for e in kernels:
        by_name.setdefault(e.name, []).append(e.time_range.elapsed_us())  # a kernel event: its duration
    rows = sorted(((sum(t), len(t), n) for n, t in by_name.items()), reverse=True)
    total = sum(r[0] for r in rows)
    return {
        "device_us_per_step": round(total / steps, 1),
        "kernels_per_step": round(len(kernels) / steps, 1),
        "top": [
            {"us_per_step": round(t / steps, 1), "calls_per_step": round(c / steps, 1), "kernel": n[:160]}
            for t, c, n in rows[:top]
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="Llama-2-7b-hf")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--variants", nargs="+", default=["eager", "thunder_default", "thunder_discover"], choices=VARIANTS
    )
    parser.add_argument("--json-out", metavar="PATH")
    args = parser.parse_args()
    out: dict = {"config": args.config, "layers": args.layers, "batch": [args.batch, args.seq], "results": {}}
    if not torch.cuda.is_available():
        out["skipped"] = "no CUDA GPU is available"
        print(json.dumps(out, indent=1))
        return
    out["gpu"] = torch.cuda.get_device_name()
    base = make_model(args.layers, args.config, seq=args.seq, device="cuda", dtype=torch.bfloat16)
    vocab = base.config.padded_vocab_size
    batch = tuple(torch.randint(0, vocab, (args.batch, args.seq), device="cuda") for _ in range(2))
    for variant in args.variants:
        try:
            out["results"][variant] = profile_variant(variant, base, batch, args.steps, args.top)
        except Exception as e:  # one failing variant is reported, the others still run
            out["results"][variant] = {"error": f"{type(e).__name__}: {e}"}
        torch.cuda.empty_cache()
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
