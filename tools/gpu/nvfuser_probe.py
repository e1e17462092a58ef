"""Does nvFuser load on the device's torch, and compute right? (stage ``nvfuser_probe``): prints one JSON object.

The wheel is ``nvfuser-cu130-torch210`` (built for torch 2.10) on the device's torch 2.11, so
``THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH=1`` is set by the plan: only whether ``nvfuser_direct``
imports and runs decides. Reports thunder-nvfuser's own verdict (``runtime.unavailable_reason``),
the import error if any, and a tiny fusion (``exp(a + b)``) against eager. Exits 1 unless nvFuser
imports and the fusion matches.
"""

from __future__ import annotations

import json
import sys

import torch


def main() -> int:
    from thunder_nvfuser import runtime

    report: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "module": runtime.installed_module(),
        "distribution": runtime.installed_distribution(),
        "thunder_nvfuser_verdict": runtime.unavailable_reason() or "available",
    }
    ok = False
    try:
        nv = runtime.import_nvfuser()
        report["nvfuser_version"] = str(getattr(nv, "__version__", None))
        with nv.FusionDefinition() as fd:
            a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nv.DataType.Float)
            b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nv.DataType.Float)
            fd.add_output(fd.ops.exp(fd.ops.add(a, b)))
        x, y = torch.randn(128, 96, device="cuda"), torch.randn(128, 96, device="cuda")
        (z,) = fd.execute([x, y])
        diff = (z - (x + y).exp()).abs().max().item()
        report["tiny_fusion_max_abs_diff"] = diff
        ok = diff <= 1e-4 * (x + y).exp().abs().max().item()
    except Exception as e:  # the question is exactly this: say why it does not load or run
        report["error"] = f"{type(e).__name__}: {e}"
    report["ok"] = ok
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
