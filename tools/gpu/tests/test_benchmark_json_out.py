"""The GPU stages' benchmarks write their JSON to --json-out as well as to stdout (a stage cut short keeps it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def test_triton_benchmark_writes_the_same_json_to_json_out(tmp_path):
    pytest.importorskip(
        "triton", reason="thunder-triton's benchmarks need the triton package (the gpu-plan env has it)"
    )
    path = tmp_path / "swiglu.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/triton_swiglu.py",
            "--smoke",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--json-out",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert json.loads(path.read_text()) == printed
    (row,) = printed["results"].values()
    assert "median_ms" in row["eager"] and "median_ms" in row["thunder_triton"], row


def test_training_benchmark_writes_each_variant_to_json_out(tmp_path):
    pytest.importorskip("litgpt")
    path = tmp_path / "step.json"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/executors_training.py",
            "--layers",
            "1",
            "--seq",
            "16",
            "--steps",
            "1",
            "--variants",
            "eager",
            "thunder_discover",
            "--json-out",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    printed = json.loads(proc.stdout)
    assert json.loads(path.read_text()) == printed
    eager, discover = printed["results"]["eager"], printed["results"]["thunder_discover"]
    # same weights, same batch: the discovered executors' first loss is eager's up to rounding
    assert abs(discover["loss_first"] - eager["loss_first"]) < 1e-3, printed["results"]
    assert printed["step"] == "forward + cross_entropy + backward + AdamW step, float32, cpu"
