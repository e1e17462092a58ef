"""What the CPU benchmarks report about where they ran, and how they import thunder.

Imported by the benchmark scripts as a sibling module (a script's folder is on ``sys.path`` when it runs).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys

import torch


def import_thunder(script: str):
    """``import thunder``, or exit naming ``script`` and the command that installs it."""
    try:
        import thunder
    except ImportError as e:
        sys.exit(
            f"{os.path.basename(script)}: cannot import thunder ({e}).\n"
            "Install it from the repository root with: "
            "python -m pip install -c constraints.txt -e packages/thunder-core"
        )
    return thunder


def package_version(distribution: str) -> str | None:
    """The installed version of ``distribution``, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info() -> dict:
    """The platform, processor, core and thread counts and Python version, for a result's ``machine`` field."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_num_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
