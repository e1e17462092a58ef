"""The triton benchmark scripts run: ``--smoke`` (tiny CPU shapes through the interpreter) and the no-GPU report.

The smoke runs check that each script's variants compute what eager computes and that thunder
claims the kernel the script is about; the timings they print mean nothing.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import runpy
import subprocess
import sys

import pytest
import torch

BENCHMARKS = pathlib.Path(__file__).resolve().parents[3] / "benchmarks"

SCRIPTS = {
    "triton_cross_entropy.py": ["triton_cross_entropy"],
    "triton_rms_norm.py": ["triton_rms_norm"],
    "triton_swiglu.py": ["triton_swiglu"],
    "triton_rope.py": ["triton_rope"],
    "triton_linear_cross_entropy.py": ["triton_linear_cross_entropy"],
    "triton_step.py": ["triton_rms_norm", "triton_rope", "triton_swiglu", "triton_linear_cross_entropy"],
}


def _run(script: str, *args: str, env=None) -> dict:
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.skipif(
    os.environ.get("THUNDER_TRITON_TEST_DEVICE", "").strip().lower() == "cuda",
    reason="--smoke runs the kernels in the CPU interpreter; on a GPU run the benchmarks themselves",
)
@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_smoke(script, monkeypatch, capsys):
    # in this process (the interpreter is already on, see conftest.py): no start-up per script
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [script, "--smoke", "--iters", "1", "--warmup", "0"])
    runpy.run_path(str(BENCHMARKS / script), run_name="__main__")
    out = json.loads(capsys.readouterr().out)
    assert out["results"], out
    for label, row in out["results"].items():
        assert "median_ms" in row["eager"], (label, row)
        tt = row["thunder_triton"]
        assert "median_ms" in tt, (label, tt)
        for op in SCRIPTS[script]:
            assert op in tt["claimed"] and f"{op}_backward" in tt["claimed"], (label, tt)
        # bfloat16 against eager: differences of a few bfloat16 ulps at most
        assert math.isfinite(tt["max_abs_diff_out"]) and tt["max_abs_diff_out"] < 0.1, (label, tt)
        assert tt["max_abs_diff_grad"] < 0.1, (label, tt)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report printed when no CUDA GPU is available")
def test_without_a_gpu_nothing_is_measured():
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    out = _run("triton_swiglu.py", env=env)
    assert "no CUDA GPU" in out["skipped"] and "results" not in out
