"""The GPU-day's first look at the device (stage ``probe``): prints one JSON object.

What is installed (torch, CUDA, Triton, the thunder packages, litgpt, Liger), the GPU, which
executors ``thunder.discover()`` finds, and whether a small ``thunder.jit`` function with a
backward pass gives eager's values and gradients on CUDA, with the default executors and with the
discovered ones. Exits 1 if CUDA is missing or a result differs from eager.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys

import torch

DISTS = (
    "torch",
    "triton",
    "thunder-core",
    "thunder-triton",
    "thunder-nvfuser",
    "thunder-apex",
    "litgpt",
    "liger-kernel",
)


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _block(x, w, b):
    """A small block with a reduction, an elementwise chain and a matmul: what every executor claims."""
    h = torch.nn.functional.rms_norm(x, (x.shape[-1],), eps=1e-5)
    h = torch.nn.functional.silu(h @ w) * (h @ w + b)
    return torch.nn.functional.cross_entropy(h.float(), torch.arange(h.shape[0], device=h.device) % h.shape[-1])


def check_against_eager(executors, dtype, device: str = "cuda") -> dict:
    """thunder.jit(_block) vs eager on ``device``: max abs difference of the loss and of each gradient."""
    import thunder

    torch.manual_seed(0)
    x = torch.randn(64, 256, device=device, dtype=dtype, requires_grad=True)
    w = torch.randn(256, 256, device=device, dtype=dtype).div_(16).requires_grad_()
    b = torch.randn(256, device=device, dtype=dtype, requires_grad=True)
    ref = _block(x, w, b)
    ref_grads = torch.autograd.grad(ref, (x, w, b))
    jfn = thunder.jit(_block, executors=executors)
    got = jfn(x, w, b)
    grads = torch.autograd.grad(got, (x, w, b))
    tol = 1e-4 if dtype == torch.float32 else 2e-2

    def rel(a, b) -> float:  # max abs difference over the reference's largest magnitude
        return (a.float() - b.float()).abs().max().item() / max(b.float().abs().max().item(), 1e-12)

    diffs = [rel(got, ref)] + [rel(g, r) for g, r in zip(grads, ref_grads)]  # the loss, then x, w, b's grads
    trace = str(thunder.last_traces(jfn)[-1])
    return {
        "dtype": str(dtype),
        "relative_diffs": diffs,
        "ok": max(diffs) <= tol,
        "tolerance": tol,
        "trace_lines": len(trace.splitlines()),
    }


def main() -> int:
    report: dict = {"python": sys.version.split()[0], "versions": {d: _version(d) for d in DISTS}}
    report["cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        report["error"] = "torch.cuda.is_available() is False"
        print(json.dumps(report, indent=1))
        return 1
    props = torch.cuda.get_device_properties(0)
    report["gpu"] = {
        "name": props.name,
        "capability": list(torch.cuda.get_device_capability()),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "sms": props.multi_processor_count,
    }
    ok = True
    try:
        import thunder

        discovered = thunder.discover()
        report["discovered_executors"] = [ex.name for ex in discovered]
        report["checks"] = {}
        for label, executors in (("default", None), ("discover", discovered)):
            for dtype in (torch.float32, torch.bfloat16):
                key = f"{label}_{str(dtype).removeprefix('torch.')}"
                try:
                    report["checks"][key] = check_against_eager(executors, dtype)
                    ok &= report["checks"][key]["ok"]
                except Exception as e:  # say what failed and go on with the other checks
                    report["checks"][key] = {"error": f"{type(e).__name__}: {e}"}
                    ok = False
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"
        ok = False
    print(json.dumps(report, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
