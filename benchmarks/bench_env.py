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


def settle_fusion(thunder, model, step, rounds: int = 5) -> int:
    """Waits for ``model``'s background fusion, then runs ``step`` and waits again until a step queues no new compile.

    A fused region's first calls queue graphs for the input layouts they meet (``torch_compile``'s regions), and a
    graph swapped in can hand the regions after it layouts they have not met either: MaxViT's fused step queued 4
    more graphs in the step after the first wait. Compiles left running on the background thread while steps are
    timed take the cores (and, under ``--cpu-time``, the process's CPU time) of whichever variant runs meanwhile.
    Returns the steps taken."""
    from thunder.executors.torch_compile import graphs_compiled

    for taken in range(1, rounds + 1):
        thunder.wait_for_fusion(model)
        before = graphs_compiled()
        step()
        thunder.wait_for_fusion(model)
        if graphs_compiled() == before:
            return taken
    return rounds
