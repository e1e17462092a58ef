"""PyTorch operations one LitGPT training step calls, eager against ``thunder.jit`` with the default executors.

One step is forward, cross-entropy loss and backward (no optimizer) of thunder's ``llama-tiny`` test config
with ``--layers`` layers, in ``--dtype``. ``torch.profiler`` counts the ``aten::`` calls of a second step of
each (after a warm-up step that compiles); ``differences`` lists the operations whose counts differ, largest
difference first. The counts do not depend on the machine's load, unlike step times on a shared CPU: an
extra ``aten::_to_copy`` is a dtype conversion eager does not run, an extra ``constant_pad_nd`` a backward
that pads where eager's writes into a slice.

    python benchmarks/aten_counts.py --dtype bfloat16
    python benchmarks/aten_counts.py --dtype float32 --layers 2

Prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import copy
import json
from collections import Counter

import torch
import torch.nn.functional as F


def _step(fn, model, idx, targets) -> None:
    logits = fn(idx)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)).backward()
    for p in model.parameters():
        p.grad = None


def _aten_calls(fn, model, idx, targets) -> Counter:
    counts: Counter = Counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _step(fn, model, idx, targets)
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            counts[event.key] += event.count
    return counts


def main() -> None:
    import thunder
    from thunder.tests.litgpt_model import GPT, Config

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = Config.from_name("llama-tiny", n_layer=args.layers)
    eager_model = GPT(config).to(getattr(torch, args.dtype))
    jit_model = copy.deepcopy(eager_model)
    compiled = thunder.jit(jit_model)
    idx = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    targets = torch.randint(0, config.vocab_size, (args.batch, args.seq))

    counts = {}
    for name, fn, model in (("eager", eager_model, eager_model), ("thunder", compiled, jit_model)):
        _step(fn, model, idx, targets)  # warm-up: the thunder program is compiled here
        counts[name] = _aten_calls(fn, model, idx, targets)
    ops = sorted(set(counts["eager"]) | set(counts["thunder"]))
    differences = [
        {"op": op, "eager": counts["eager"][op], "thunder": counts["thunder"][op]}
        for op in ops
        if counts["eager"][op] != counts["thunder"][op]
    ]
    differences.sort(key=lambda d: (-abs(d["thunder"] - d["eager"]), d["op"]))
    print(
        json.dumps(
            {
                "model": {"litgpt_config": "llama-tiny", "n_layer": args.layers, "batch": [args.batch, args.seq]},
                "step": f"forward + cross_entropy + backward, {args.dtype}, cpu",
                "torch": torch.__version__,
                "total_aten_calls": {name: sum(c.values()) for name, c in counts.items()},
                "differences": differences,
                "eager": dict(sorted(counts["eager"].items())),
                "thunder": dict(sorted(counts["thunder"].items())),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
