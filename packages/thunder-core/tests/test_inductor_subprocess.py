"""The torch_compile executor's compile subprocess (thunder.executors.inductor_subprocess): background compiles
fill Inductor's cache there, the worker reads it, and nothing depends on the subprocess working."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time

import pytest
import torch

import thunder
from thunder.executors import inductor_subprocess, tiers, torch_compile
from thunder.executors.torch_compile import TorchCompileExecutor

any_size = TorchCompileExecutor("torch_compile_any_size", min_region_numel=0)


def _program():
    # a constant of its own, so that no earlier test or run has Inductor's cache warm for this graph already
    c = random.uniform(1.0, 2.0)

    def f(a, b):
        return torch.tanh(a * c + b) * b.exp(), (a - b).sin().sum(0)

    return f


def _run_until_fused(jf, f, args):
    for got, want in zip(jf(*args), f(*args)):
        torch.testing.assert_close(got, want)
    assert thunder.wait_for_fusion(jf, timeout=300)
    assert thunder.fusion_states(jf) == ["fused"]
    for got, want in zip(jf(*args), f(*args)):
        torch.testing.assert_close(got, want)


def _wait_for_the_worker_to_end():
    deadline = time.monotonic() + 30
    while tiers._worker is not None and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.fixture
def server(monkeypatch):
    """A subprocess of the test's own (the process-wide one may be off: THUNDER_INDUCTOR_SUBPROCESS=0)."""

    def use(command=None):
        # (at normal priority: in the lowest, a compile waits for the other test processes' idle time)
        s = inductor_subprocess._Server(command, lowest_priority=False)
        s.broken = False
        monkeypatch.setattr(inductor_subprocess, "_server", s)
        return s

    monkeypatch.setattr(torch_compile, "SUBPROCESS_LINGER_S", 0.5)
    yield use
    inductor_subprocess._server.close()


def test_a_background_compile_runs_in_the_subprocess_and_the_worker_reads_inductors_cache(server):
    from torch._dynamo.utils import counters

    s = server()
    f = _program()
    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()])
    hits = counters["inductor"]["fxgraph_cache_hit"]
    _run_until_fused(jf, f, (torch.randn(6, 5), torch.randn(6, 5)))
    assert s.warmed >= 1
    # the worker's own compiles read what the subprocess wrote
    assert counters["inductor"]["fxgraph_cache_hit"] - hits == s.warmed
    # the subprocess ends shortly after the worker's work: no process outlives it
    _wait_for_the_worker_to_end()
    proc = s._proc
    deadline = time.monotonic() + torch_compile.SUBPROCESS_LINGER_S + 30
    while s._proc is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert s._proc is None
    if proc is not None:
        proc.wait(timeout=30)


def test_a_subprocess_that_fails_leaves_the_compile_to_the_worker(server):
    s = server([sys.executable, "-c", "import sys; sys.exit(3)"])
    f = _program()
    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()])
    _run_until_fused(jf, f, (torch.randn(4, 3), torch.randn(4, 3)))
    assert s.broken and s.warmed == 0 and s._proc is None


def test_a_graph_the_subprocess_cannot_compile_is_compiled_by_the_worker(server):
    # the subprocess answers with an error (here: every request fails there); the worker compiles it itself
    s = server([sys.executable, "-c", _ANSWER_ERRORS])
    f = _program()
    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()])
    _run_until_fused(jf, f, (torch.randn(4, 3), torch.randn(4, 3)))
    assert not s.broken and s.warmed == 0


_ANSWER_ERRORS = f"""
import sys
sys.path.insert(0, {str(__import__("pathlib").Path(inductor_subprocess.__file__).parent)!r})
import inductor_subprocess as server
while (header := server._read_exactly(sys.stdin.buffer, server._HEADER.size)) is not None:
    server._read_exactly(sys.stdin.buffer, server._HEADER.unpack(header)[0])
    server._send(sys.stdout.buffer, ("error", "no compiler here"))
"""


def test_the_subprocess_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("THUNDER_INDUCTOR_SUBPROCESS", "0")
    assert inductor_subprocess._Server().broken
    monkeypatch.setenv("THUNDER_INDUCTOR_SUBPROCESS", "1")
    assert not inductor_subprocess._Server().broken


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux's idle scheduling class")
def test_the_subprocess_runs_in_the_idle_scheduling_class():
    s = inductor_subprocess._Server()
    s.broken = False
    try:
        proc = s._start()
        assert os.sched_getscheduler(proc.pid) == os.SCHED_IDLE
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 19
        s.prioritize(True)  # (thunder.wait_for_fusion: normal priority where the system allows it)
        if os.geteuid() == 0:
            assert os.sched_getscheduler(proc.pid) == os.SCHED_OTHER
        s.prioritize(False)
        assert os.sched_getscheduler(proc.pid) == os.SCHED_IDLE
    finally:
        s.close()
    assert s._proc is None and proc.poll() is not None


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from Linux's /proc")
def test_a_process_exiting_while_the_subprocess_compiles_exits_promptly(tmp_path):
    # the worker waits for the subprocess's reply; at exit the subprocess is killed rather than waited for
    script = tmp_path / "exits.py"
    script.write_text(
        "import time, torch, thunder\n"
        "from thunder.executors import inductor_subprocess\n"
        "def f(a):\n"
        "    return torch.tanh(a * 1.8125 + 1) * a.exp()\n"
        "jf = thunder.jit(f, executors=['torch_compile', *thunder.get_default_executors()])\n"
        "jf(torch.randn(512, 256))\n"
        "deadline = time.monotonic() + 60\n"
        "while inductor_subprocess._server._proc is None and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print('pid', inductor_subprocess._server._proc.pid, flush=True)\n"
    )
    start = time.monotonic()
    env = {**os.environ, "THUNDER_INDUCTOR_SUBPROCESS": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert time.monotonic() - start < 60


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # (a zombie has exited)
        return stat.read().split()[2] != "Z"
