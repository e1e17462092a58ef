from __future__ import annotations

import importlib
import sys

import apex_standin
import pytest
import torch

import thunder_apex.executor
from thunder.core.devices import DeviceType


def _real_apex_cuda() -> str | None:
    """None if NVIDIA apex with its CUDA extensions is importable here and a GPU is present, else why not."""
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    try:
        package = importlib.import_module("apex.contrib.xentropy")
        importlib.import_module("fused_layer_norm_cuda")
    except ImportError as e:
        return f"needs NVIDIA apex built with its CUDA extensions ({e})"
    if not hasattr(package, "SoftmaxCrossEntropyLoss"):
        return "needs NVIDIA apex built with --xentropy"
    return None


def pytest_collection_modifyitems(config, items):
    if not any("apex_cuda" in item.keywords for item in items):
        return
    reason = _real_apex_cuda()
    if reason is None:
        return
    for item in items:
        if "apex_cuda" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"{reason}: the apex_cuda tests run real apex kernels"))


@pytest.fixture
def no_apex(monkeypatch):
    """Makes apex look not installed (whatever this machine has)."""
    for name in list(sys.modules):
        if name == "apex" or name.startswith("apex.") or name in ("xentropy_cuda", "fused_layer_norm_cuda"):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "apex", None)


@pytest.fixture
def standin(monkeypatch):
    """The PyTorch STAND-IN for apex (tests/apex_standin.py) in sys.modules, and CPU tensors accepted.

    Uses the documented test hook ``thunder_apex.executor.SUPPORTED_DEVICE_TYPES``.
    """
    apex_standin.install(monkeypatch)
    monkeypatch.setattr(thunder_apex.executor, "SUPPORTED_DEVICE_TYPES", {DeviceType.CUDA, DeviceType.CPU})
    return apex_standin
