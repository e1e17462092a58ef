"""Runs every CPU benchmark once at a tiny size: each must finish and print one JSON object without errors.

CI runs this (``python -m tox -e benchmarks``) so the benchmarks keep working; the figures it prints at
these sizes mean nothing. The GPU benchmarks (nvFuser, Triton) are checked by ``tools/gpu`` instead.

    python benchmarks/smoke.py                 # all of them
    python benchmarks/smoke.py overhead decode # some of them
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (script, arguments): the smallest run that still goes through every variant's code path
RUNS: dict[str, tuple[str, list[str]]] = {
    "overhead": ("overhead.py", ["--no-torch-compile", "--number", "200", "--repeat", "2"]),
    "compile_time": ("compile_time.py", ["--layers", "1", "--repeats", "1", "--eager-calls", "1", "--seq", "16"]),
    "training_step": (
        "training_step.py",
        ["--layers", "1", "--steps", "2", "--wall-steps", "2", "--variants", "eager", "thunder", "thunder_discover"],
    ),
    "training_step_hf": (
        "training_step.py",
        ["--model", "hf_llama", "--layers", "1", "--steps", "2", "--wall-steps", "2", "--variants", "eager", "thunder"],
    ),
    "decode_litgpt": (
        "decode.py",
        ["--tokens", "4", "--prompt", "4", "--repeats", "1", "--backends", "eager", "thunder", "thunder-discover"],
    ),
    "decode_hf": (
        "decode.py",
        [
            "--model",
            "hf-dynamic-cache",
            "--tokens",
            "4",
            "--prompt",
            "4",
            "--repeats",
            "1",
            "--backends",
            "eager",
            "thunder",
        ],
    ),
    "executors_training": (
        "executors_training.py",
        [
            "--layers",
            "1",
            "--steps",
            "2",
            "--seq",
            "16",
            "--variants",
            "eager",
            "thunder_default",
            "thunder_torch_compile",
        ],
    ),
    "aten_counts": ("aten_counts.py", ["--seq", "16"]),
    "aten_counts_vision": ("aten_counts.py", ["--model", "convnext"]),
    "fusion_payoff": ("fusion_payoff.py", ["--ops", "2", "--numel", "4096", "--number", "2", "--repeat", "1"]),
    "thunderfx": ("thunderfx.py", ["--layers", "1", "--steps", "2", "--seq", "16", "--no-inductor"]),
    "distributed": ("distributed.py", ["--layers", "1", "--steps", "1", "--warmup", "1", "--seq", "16"]),
    "vision": ("vision.py", ["--smoke", "--control", "--cpu-time", "--stat", "min"]),
}

# runs that need thunder-core's [vision] extra (timm), so the core-vision env runs them
# (``python benchmarks/smoke.py vision aten_counts_vision``), not the benchmarks env; left out of the default list
NEEDS_VISION_EXTRA = {"vision", "aten_counts_vision"}


def errors_in(report, path: str = "") -> list[str]:
    """Every ``"error"`` entry anywhere in a benchmark's JSON report, with where it is."""
    found = []
    if isinstance(report, dict):
        for key, value in report.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "error" and value:
                found.append(f"{where}: {value}")
            else:
                found.extend(errors_in(value, where))
    elif isinstance(report, list):
        for i, value in enumerate(report):
            found.extend(errors_in(value, f"{path}[{i}]"))
    return found


def run(name: str, timeout: float) -> str | None:
    """Runs one benchmark; returns what went wrong, or None."""
    script, args = RUNS[name]
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, str(HERE / script), *args], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"did not finish within {timeout:.0f} s"
    print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)
    if proc.returncode != 0:
        return f"exit code {proc.returncode}\n{proc.stderr[-3000:]}"
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        return f"its output is not one JSON object ({e}):\n{proc.stdout[-2000:]}"
    problems = errors_in(report)
    return "\n".join(problems) if problems else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "names",
        nargs="*",
        help=f"benchmarks to run (default: all of {', '.join(n for n in RUNS if n not in NEEDS_VISION_EXTRA)})",
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds one benchmark may take")
    args = parser.parse_args()
    names = args.names or [n for n in RUNS if n not in NEEDS_VISION_EXTRA]
    unknown = [n for n in names if n not in RUNS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    failures = {name: problem for name in names if (problem := run(name, args.timeout))}
    for name, problem in failures.items():
        print(f"FAILED {name}: {problem}", file=sys.stderr)
    print(f"{len(names) - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
