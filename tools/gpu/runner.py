"""Runs one call of the GPU-day plan (tools/gpu/plan.py) on the device machine, stage by stage.

    python3 tools/gpu/runner.py call1            # on the device: what tools/gpu/run.sh does
    python3 tools/gpu/runner.py call1 --dry-run  # anywhere: print the stages' commands and timeouts

Each stage runs in its own process group with its own timeout (cut further so the call ends
inside its limit); a stage whose ``needs`` failed is skipped, saying which. What comes back from
``$OUT`` is limited to 8 files, so everything is folded into three:

- ``summary.json``: per stage its status (ok, failed, timeout, skipped), exit code, seconds and
  the last lines of its log; rewritten after every stage, so a call cut short still reports;
- ``results.tar.gz``: the stages' JSON outputs and JUnit XML files (under ``results/``);
- ``logs.tar.gz``: every stage's full log (under ``logs/``).

The last lines printed are a short table of the stages (the device tool returns the end of the
output).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan import CALLS, GPU_DAY, ROOT, Call, Stage  # noqa: E402

WORK = Path(os.environ.get("GPU_DAY_WORK", "/tmp/gpu-day"))
LOG_TAIL_LINES = 25


def _argv(stage: Stage, results: Path) -> list[str]:
    return [a.format(py=sys.executable, work=str(WORK), results=str(results)) for a in stage.argv]


def _env(stage: Stage) -> dict:
    site = WORK / "site"
    extra = [str(site)]
    apex_build = WORK / "apex-build"
    if apex_build.is_dir():
        extra.append(str(apex_build))
    pythonpath = os.pathsep.join(extra + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "PYTHONUNBUFFERED": "1",
        "PYTHON": sys.executable,  # for tools/gpu/install.sh
        "HF_HUB_OFFLINE": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(WORK / "inductor-cache"),
        "TRITON_CACHE_DIR": str(WORK / "triton-cache"),
    }
    env.pop("TRITON_INTERPRET", None)  # the GPU, not Triton's interpreter
    env.update(stage.env)
    return env


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_stage(stage: Stage, results: Path, logs: Path, timeout_s: float) -> dict:
    """Runs one stage; returns its record for summary.json."""
    log = logs / f"{stage.name}.log"
    stdout_path = results / stage.stdout_json if stage.stdout_json else log
    argv = _argv(stage, results)
    t0 = time.monotonic()
    record: dict = {"command": " ".join(argv), "timeout_s": round(timeout_s, 1)}
    with open(log, "ab") as err, open(stdout_path, "ab") as out:
        err.write(f"$ {' '.join(argv)}\n".encode())
        err.flush()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=_env(stage),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as e:
            record.update(status="failed", error=f"could not start: {e}", seconds=0.0)
            return record
        try:
            rc = proc.wait(timeout=timeout_s)
            record.update(status="ok" if rc == 0 else "failed", returncode=rc)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            record.update(status="timeout", returncode=proc.returncode)
    record["seconds"] = round(time.monotonic() - t0, 1)
    record["log_tail"] = _tail(log)
    return record


def _pack(out: Path, results: Path, logs: Path, summary: dict) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    for name, folder in (("results", results), ("logs", logs)):
        with tarfile.open(out / f"{name}.tar.gz", "w:gz") as tar:
            tar.add(folder, arcname=name)


def run_call(call: Call, out: Path, budget_s: float | None = None) -> dict:
    """Runs the call's stages in order, each inside what is left of the call's time.

    ``budget_s`` shortens the call below the sum of its stages' timeouts (when the session has less
    device time left than planned): the stages still run in priority order, the later ones are cut
    or skipped, and what ran is packed into ``out`` before the device tool's own timeout.
    """
    results, logs = WORK / "results" / call.name, WORK / "logs" / call.name
    for folder in (results, logs, out):
        folder.mkdir(parents=True, exist_ok=True)
    seconds = call.stage_seconds if budget_s is None else min(call.stage_seconds, budget_s)
    deadline = time.monotonic() + seconds
    summary: dict = {"call": call.name, "stages": {}}
    status: dict[str, str] = {}
    for stage in call.stages:
        failed_needs = [n for n in stage.needs if status.get(n) != "ok"]
        left = deadline - time.monotonic()
        if failed_needs:
            record = {"status": "skipped", "reason": f"needs {', '.join(failed_needs)}, which did not succeed"}
        elif left < 1:
            record = {"status": "skipped", "reason": "no time left in this call"}
        else:
            print(f"[gpu-day] {call.name}/{stage.name} (up to {min(stage.timeout_s, left):.0f} s)", flush=True)
            record = run_stage(stage, results, logs, min(stage.timeout_s, left))
        status[stage.name] = record["status"]
        summary["stages"][stage.name] = record
        _pack(out, results, logs, summary)
    print(f"\n[gpu-day] {call.name}: stage, status, seconds")
    for name, r in summary["stages"].items():
        print(f"  {name:<26} {r['status']:<8} {r.get('seconds', '-')}")
    following = [c for c, prev in zip(GPU_DAY[1:], GPU_DAY) if prev.name == call.name]
    for nxt in following:  # the warm window is 30 s: the next call's arguments, ready to paste
        args = {"command": nxt.command, "carry": list(nxt.carry), "timeout_s": nxt.timeout_s}
        print(f"[gpu-day] make {nxt.name} NOW (the machine goes back 30 s after this call): {json.dumps(args)}")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("call", choices=sorted(CALLS))
    parser.add_argument("--dry-run", action="store_true", help="print the stages' commands; run nothing")
    parser.add_argument(
        "--budget-s",
        type=float,
        help="finish within this many seconds (less than the stages' sum when the session has less device time left)",
    )
    args = parser.parse_args(argv)
    call = CALLS[args.call]
    if args.dry_run:
        for stage in call.stages:
            print(f"{stage.name:<26} {stage.timeout_s:>4} s  {' '.join(_argv(stage, WORK / 'results' / call.name))}")
        print(f"total {call.stage_seconds} s; device tool timeout_s {call.timeout_s}; carry {list(call.carry)}")
        return 0
    out = Path(os.environ.get("OUT") or WORK / "out")
    summary = run_call(call, out, args.budget_s)
    return 0 if all(r["status"] == "ok" for r in summary["stages"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
