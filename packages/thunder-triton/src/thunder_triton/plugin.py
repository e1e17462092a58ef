"""The module the ``thunder`` entry point names: the hooks and the availability check.

Nothing here imports Triton: the check looks for the package with ``importlib.util.find_spec``
and asks PyTorch whether CUDA is available; the kernels are defined (and Triton imported) only
when :func:`thunder_executors` is called on a machine where they can run.
"""

from __future__ import annotations

import importlib.util
import os

from thunder.plugins import hookimpl

__all__ = [
    "interpret_mode",
    "accepted_devicetypes",
    "unavailable_reason",
    "thunder_unavailable_reason",
    "thunder_executors",
]


def interpret_mode() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``): on CPU tensors, slowly."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "yes", "on")


def accepted_devicetypes() -> tuple:
    """The device types the kernels take: CUDA, and CPU too in interpreter mode (which also copies CUDA tensors)."""
    from thunder.core.devices import DeviceType

    return (DeviceType.CPU, DeviceType.CUDA) if interpret_mode() else (DeviceType.CUDA,)


def _cuda_available() -> bool:
    import torch

    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install is the same as none here
        return False


def unavailable_reason() -> str | None:
    """Why the Triton executor cannot run here, or ``None`` when it can."""
    if importlib.util.find_spec("triton") is None:
        return "the triton package is not installed (pip install triton)"
    if interpret_mode():
        if importlib.util.find_spec("numpy") is None:
            return "TRITON_INTERPRET=1 is set but numpy, which Triton's interpreter needs, is not installed"
        return None
    if _cuda_available():
        return None
    return "no CUDA device is available and TRITON_INTERPRET=1 is not set (Triton's CPU interpreter)"


@hookimpl
def thunder_unavailable_reason() -> str | None:
    return unavailable_reason()


@hookimpl
def thunder_executors() -> list:
    if unavailable_reason() is not None:
        return []
    from thunder_triton.executor import triton_ex

    return [triton_ex]
