"""benchmarks/nvfuser_llama.py without a GPU: one JSON object saying why nothing was measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from thunder_nvfuser import runtime

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "nvfuser_llama.py"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report of a machine without a CUDA device")
@pytest.mark.skipif(not SCRIPT.exists(), reason="runs from a checkout of the repository (benchmarks/ not packaged)")
def test_benchmark_skips_with_the_reason_without_a_gpu():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["skipped"] == runtime.cuda_unavailable_reason()
    assert report["torch"] == torch.__version__
