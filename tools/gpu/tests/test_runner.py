"""The GPU-day runner (tools/gpu/runner.py): stage timeouts hold, failures skip what needs them, results come back packed."""

from __future__ import annotations

import json
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import runner  # noqa: E402
from plan import Call, Stage  # noqa: E402


@pytest.fixture
def work(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "WORK", tmp_path / "work")
    return tmp_path


def _py(name: str, code: str, timeout_s: int = 20, **kw) -> Stage:
    return Stage(name, ("{py}", "-c", code), timeout_s, "test", **kw)


def test_stages_run_in_order_with_their_own_timeouts_and_needs(work):
    call = Call(
        "t",
        (),
        (
            _py("install", "print('installed')"),
            _py(
                "bench",
                "import json, sys; json.dump(dict(ms=1.5), sys.stdout)",
                stdout_json="bench.json",
                needs=("install",),
            ),
            _py("hang", "import time; time.sleep(60)", timeout_s=2),
            _py("after_hang", "import sys; sys.exit(3)", needs=("install",)),
            _py("needs_hang", "print('never')", needs=("hang",)),
        ),
        "now",
    )
    out = work / "out"
    t0 = time.monotonic()
    summary = runner.run_call(call, out)
    assert time.monotonic() - t0 < 30  # the hanging stage was cut at its 2 s
    stages = summary["stages"]
    assert [stages[n]["status"] for n in stages] == ["ok", "ok", "timeout", "failed", "skipped"]
    assert stages["after_hang"]["returncode"] == 3
    assert "hang" in stages["needs_hang"]["reason"]
    assert sorted(p.name for p in out.iterdir()) == ["logs.tar.gz", "results.tar.gz", "summary.json"]
    assert json.loads((out / "summary.json").read_text()) == summary
    with tarfile.open(out / "results.tar.gz") as tar:
        assert json.load(tar.extractfile("results/bench.json")) == {"ms": 1.5}
    with tarfile.open(out / "logs.tar.gz") as tar:
        assert "installed" in tar.extractfile("logs/install.log").read().decode()


def test_a_call_never_runs_past_the_sum_of_its_stage_timeouts(work):
    # the first stage overruns nothing, but a later stage is only given what is left of the call
    call = Call(
        "t",
        (),
        (_py("a", "import time; time.sleep(1.5)", timeout_s=2), _py("b", "import time; time.sleep(60)", timeout_s=3)),
        "now",
    )
    t0 = time.monotonic()
    summary = runner.run_call(call, work / "out")
    assert time.monotonic() - t0 < 2 + 3 + 8
    assert summary["stages"]["b"]["status"] == "timeout"
    assert summary["stages"]["b"]["timeout_s"] <= 3.6


def test_dry_run_prints_every_stage_command(capsys):
    assert runner.main(["call2", "--dry-run"]) == 0
    text = capsys.readouterr().out
    for name in ("install", "nvfuser_join", "nvfuser_probe", "nvfuser_tests", "nvfuser_llama", "training_step"):
        assert name in text
    assert "timeout_s 305" in text or "device tool timeout_s" in text


def test_probe_block_matches_eager_on_the_cpu():
    # the probe's own check, run where it can: thunder's default executors on CPU tensors
    import probe

    result = probe.check_against_eager(None, torch.float32, device="cpu")
    assert result["ok"], result
    assert len(result["relative_diffs"]) == 4  # the loss and the three gradients


def test_the_first_gpu_day_call_ends_by_printing_the_next_call(work, capsys):
    first = runner.GPU_DAY[0]
    call = Call(first.name, (), (_py("a", "pass"),), "now")
    runner.run_call(call, work / "out")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    second = runner.GPU_DAY[1]
    assert last.startswith(f"[gpu-day] make {second.name} NOW")
    assert json.loads(last.split(": ", 1)[1]) == {
        "command": second.command,
        "carry": list(second.carry),
        "timeout_s": second.timeout_s,
    }


def test_probe_reports_a_result_that_differs_from_eager(monkeypatch):
    import probe

    import thunder

    real_jit = thunder.jit
    monkeypatch.setattr(thunder, "jit", lambda fn, **kw: real_jit(lambda x, w, b: fn(x, w * 1.01, b), **kw))
    result = probe.check_against_eager(None, torch.float32, device="cpu")
    assert not result["ok"], result
    assert result["relative_diffs"][2] > 1e-3  # w's gradient, the one scaled


def test_a_budget_below_the_stages_sum_cuts_the_later_stages(work):
    call = Call(
        "t",
        (),
        (_py("a", "import time; time.sleep(1)", timeout_s=10), _py("b", "import time; time.sleep(60)", timeout_s=50)),
        "now",
    )
    t0 = time.monotonic()
    summary = runner.run_call(call, work / "out", budget_s=4)
    assert time.monotonic() - t0 < 4 + 8
    assert summary["stages"]["a"]["status"] == "ok"
    assert summary["stages"]["b"]["status"] == "timeout" and summary["stages"]["b"]["timeout_s"] <= 3.1
