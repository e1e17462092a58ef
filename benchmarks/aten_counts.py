"""PyTorch operations one training step calls, eager against ``thunder.jit`` with the default executors.

By default one step is forward, cross-entropy loss and backward (no optimizer) of thunder's ``llama-tiny``
test config with ``--layers`` layers, in ``--dtype``. With ``--model NAME`` (a name of
``thunder.tests.vision_models.MODELS``, as in ``benchmarks/vision.py``; needs timm) it is that vision model's
step in train mode, float32: forward, ``out.square().mean()`` and backward, batch ``--batch``.
``torch.profiler`` counts the ``aten::`` calls of a second step of each (after a warm-up step that compiles);
``differences`` lists the operations whose counts differ, largest difference first. ``bytes`` are the bytes
of the new tensors each operation returned (outputs that share no storage with its inputs), counted below
autograd by a ``TorchDispatchMode`` in a third step; ``bytes_differences`` lists the operations whose bytes
differ. Neither depends on the machine's load, unlike step times on a shared CPU: an extra
``aten::_to_copy`` is a dtype conversion eager does not run, an extra ``constant_pad_nd`` a backward that
pads where eager's writes into a slice, extra ``add`` bytes a gradient accumulated out of place.

    python benchmarks/aten_counts.py --dtype bfloat16
    python benchmarks/aten_counts.py --dtype float32 --layers 2
    python benchmarks/aten_counts.py --model convnext    # in an env with timm (tox -e core-vision)

Prints exactly one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode


def _llm_step(fn, model, idx, targets) -> None:
    logits = fn(idx)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)).backward()
    for p in model.parameters():
        p.grad = None


def _vision_step(fn, model, x) -> None:
    fn(x).square().mean().backward()
    for p in model.parameters():
        p.grad = None


def _aten_calls(step) -> Counter:
    counts: Counter = Counter()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            counts[event.key] += event.count
    return counts


class _NewBytes(TorchDispatchMode):
    """Per aten operation, the bytes of the tensors it returned that share no storage with its arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr()
            for t in pytree.tree_leaves((args, kwargs))
            if isinstance(t, torch.Tensor) and t.device.type != "meta"
        }
        new = {}
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                storage = t.untyped_storage()
                if storage.data_ptr() not in inputs:
                    new[storage.data_ptr()] = storage.nbytes()
        self.bytes[f"aten::{func.overloadpacket.__name__}"] += sum(new.values())
        return out


def _new_bytes(step) -> Counter:
    mode = _NewBytes()
    with mode:
        step()
    return mode.bytes


def _differences(eager: Counter, thunder: Counter) -> list[dict]:
    ops = sorted(set(eager) | set(thunder))
    found = [{"op": op, "eager": eager[op], "thunder": thunder[op]} for op in ops if eager[op] != thunder[op]]
    found.sort(key=lambda d: (-abs(d["thunder"] - d["eager"]), d["op"]))
    return found


def _llm_steps(args) -> tuple[dict, dict]:
    import thunder
    from thunder.tests.litgpt_model import GPT, Config

    torch.manual_seed(0)
    config = Config.from_name("llama-tiny", n_layer=args.layers)
    eager_model = GPT(config).to(getattr(torch, args.dtype))
    jit_model = copy.deepcopy(eager_model)
    compiled = thunder.jit(jit_model)
    idx = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    targets = torch.randint(0, config.vocab_size, (args.batch, args.seq))
    steps = {
        "eager": lambda: _llm_step(eager_model, eager_model, idx, targets),
        "thunder": lambda: _llm_step(compiled, jit_model, idx, targets),
    }
    described = {
        "model": {"litgpt_config": "llama-tiny", "n_layer": args.layers, "batch": [args.batch, args.seq]},
        "step": f"forward + cross_entropy + backward, {args.dtype}, cpu",
    }
    return steps, described


def _vision_steps(args) -> tuple[dict, dict]:
    import thunder
    from thunder.tests.vision_models import MODELS, create, example_input

    if args.model not in MODELS:
        sys.exit(f"--model {args.model!r} is not a vision model; known: {sorted(MODELS)}")
    eager_model, jit_model = create(args.model), create(args.model)
    compiled = thunder.jit(jit_model)
    x = example_input(args.model, args.batch)
    steps = {
        "eager": lambda: _vision_step(eager_model, eager_model, x),
        "thunder": lambda: _vision_step(compiled, jit_model, x),
    }
    described = {
        "model": {"vision_model": args.model, "batch": list(x.shape)},
        "step": "train mode, forward + square().mean() + backward, float32, cpu",
    }
    return steps, described


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a vision model of benchmarks/vision.py (default: the LitGPT llama-tiny step)")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--layers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=64)
    args = parser.parse_args()

    steps, described = _vision_steps(args) if args.model else _llm_steps(args)
    counts, new_bytes = {}, {}
    for name, step in steps.items():
        step()  # warm-up: the thunder program is compiled here
        counts[name] = _aten_calls(step)
        new_bytes[name] = _new_bytes(step)
    print(
        json.dumps(
            {
                **described,
                "torch": torch.__version__,
                "total_aten_calls": {name: sum(c.values()) for name, c in counts.items()},
                "total_new_bytes": {name: sum(c.values()) for name, c in new_bytes.items()},
                "differences": _differences(counts["eager"], counts["thunder"]),
                "bytes_differences": _differences(new_bytes["eager"], new_bytes["thunder"]),
                "eager": dict(sorted(counts["eager"].items())),
                "thunder": dict(sorted(counts["thunder"].items())),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
