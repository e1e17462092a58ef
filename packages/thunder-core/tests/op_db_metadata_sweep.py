"""Does the trace believe what the kernel returns? An op_db sweep over every dtype an op supports.

    python packages/thunder-core/tests/op_db_metadata_sweep.py            # every op (~25 min on 2 cores)
    python packages/thunder-core/tests/op_db_metadata_sweep.py sum prod   # ops whose name contains these

For each op, its function and in-place variants and each dtype (float32/64/16, bfloat16, int64/32/8, uint8, bool)
it supports on the CPU, one sample input: the dtypes and shapes of the outputs as the traced program sees them
(read inside ``thunder.jit``) against eager's outputs. A mismatch is a trace whose metadata disagree with the
kernel that runs: the values may still look right (the torch executor runs PyTorch's kernel), but dtype reads
inside the function, later tracing decisions and a fusion executor's decomposition follow the trace.
``test_op_db.py`` compares float32 values only, so it does not see these.
"""

from __future__ import annotations

import collections
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import op_db_support as support  # noqa: E402
import torch  # noqa: E402

import thunder  # noqa: E402

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPES += [torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]


def _metadata(x) -> list:
    return [(t.dtype, tuple(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__ for t in support._leaves(x)]


def _first_sample(op, dtype):
    try:
        return next(iter(op.sample_inputs("cpu", dtype)), None)
    except Exception:
        return None


def main(names: list[str]) -> None:
    warnings.simplefilter("ignore")
    mismatches: list[str] = []
    errors: collections.Counter = collections.Counter()
    n = 0
    for op in support.load_op_db():
        name = support.full_name(op)
        if names and not any(s in name for s in names) or support._NONDETERMINISTIC.search(op.name):
            continue
        supported = op.supported_dtypes("cpu")
        variants = ["function"] + (["inplace"] if op.inplace_variant is not None else [])
        for variant in variants:
            fn = support._call_variant(op, variant)
            for dtype in (d for d in DTYPES if d in supported):
                sample = _first_sample(op, dtype)
                if sample is None:
                    continue
                try:
                    expected = fn(*support._clone((sample.input, *sample.args)), **support._clone(sample.kwargs))
                except Exception:
                    continue  # eager rejects the sample
                n += 1
                args, kwargs = support._clone((sample.input, *sample.args)), support._clone(sample.kwargs)
                try:
                    seen = thunder.jit(lambda *a, **k: _metadata(fn(*a, **k)))(*args, **kwargs)
                except Exception:
                    errors[f"{name} {variant}"] += 1
                    continue
                if seen != _metadata(expected):
                    mismatches.append(f"{name} {variant} {dtype}: trace {seen}, eager {_metadata(expected)}")
    print(f"# {n} samples: {len(mismatches)} with trace metadata unlike eager's; thunder errors in {len(errors)} cases")
    print("\n".join(mismatches))
    for case, count in errors.most_common():
        print(f"error x{count}: {case}")


if __name__ == "__main__":
    main(sys.argv[1:])
