"""Availability reporting and discovery of the triton plugin."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import thunder
import thunder.plugins


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(__file__),
    )


def test_discovered_with_the_interpreter():
    executors = thunder.discover()
    names = [ex.name for ex in executors]
    assert "triton" in names
    # plugin executors come before the default ones
    assert names.index("triton") < names.index("torch")
    out = io.StringIO()
    thunder.plugins.report(file=out)
    assert "executor: triton (TritonExecutor" in out.getvalue()


def test_unavailable_without_cuda_or_interpreter():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU even on a CUDA machine
    proc = _run(
        """
        import io, sys
        import thunder, thunder.plugins
        import thunder_triton
        reason = thunder_triton.unavailable_reason()
        print("REASON:", reason)
        print("NAMES:", [ex.name for ex in thunder.discover()])
        out = io.StringIO()
        thunder.plugins.report(file=out)
        print(out.getvalue())
        try:
            thunder_triton.get_executor()
        except RuntimeError as e:
            print("ERROR:", e)
        print("TRITON IMPORTED:", "triton" in sys.modules)
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "REASON: no CUDA device is available and TRITON_INTERPRET=1 is not set" in out
    names_line = next(line for line in out.splitlines() if line.startswith("NAMES:"))
    assert "'triton'" not in names_line and "'torch'" in names_line
    assert "contributed nothing: no CUDA device is available" in out
    assert "ERROR: the thunder-triton executor is unavailable: no CUDA device" in out
    assert "TRITON IMPORTED: False" in out


def test_importing_the_plugin_imports_no_triton():
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = _run(
        """
        import sys
        import thunder_triton, thunder_triton.plugin
        assert thunder_triton.unavailable_reason() is None
        print("TRITON IMPORTED:", "triton" in sys.modules)
        """,
        env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "TRITON IMPORTED: False" in proc.stdout
