"""Conventions users of lightning-thunder and PyTorch expect from an installed thunder-core."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import thunder

CORE = Path(__file__).resolve().parents[1]


def _pyproject() -> str:
    return (CORE / "pyproject.toml").read_text()


def test_get_all_executors_at_top_level():
    names = [ex.name for ex in thunder.get_all_executors()]
    # every default executor and the registered-but-not-default torch_compile
    assert {ex.name for ex in thunder.get_default_executors()} <= set(names)
    assert "torch_compile" in names
    assert thunder.get_all_executors() == thunder.extend.get_all_executors()


def test_import_prints_nothing():
    # torch prints "Failed to initialize NumPy" on import without numpy: thunder-core depends on it
    deps = re.search(r"^dependencies = \[(.*?)^\]", _pyproject(), re.S | re.M).group(1)
    assert re.search(r'^\s*"numpy"', deps, re.M), deps
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import thunder"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0
    assert proc.stdout == "" and proc.stderr == "", proc.stderr


def test_torch_compile_backend_name(tmp_path):
    # the entry point pip writes from thunder-core's pyproject; an installed thunder-core has it too
    m = re.search(
        r"^\[project\.entry-points\.torch_dynamo_backends\]\nthunder = \"([\w.]+):(\w+)\"", _pyproject(), re.M
    )
    assert m, "thunder-core declares no torch_dynamo_backends entry point named thunder"
    dist = tmp_path / "thunder_backend_check-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: thunder-backend-check\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(f"[torch_dynamo_backends]\nthunder = {m.group(1)}:{m.group(2)}\n")
    script = textwrap.dedent(
        """
        import torch
        import thunder.dynamo

        calls = []
        original = thunder.dynamo.ThunderCompiler.__call__

        def counting(self, gm, example_inputs):
            calls.append(len(example_inputs))
            return original(self, gm, example_inputs)

        thunder.dynamo.ThunderCompiler.__call__ = counting

        def f(x, w):
            return torch.nn.functional.gelu(x @ w).sum(-1)

        x, w = torch.randn(4, 8), torch.randn(8, 8)
        compiled = torch.compile(f, backend="thunder")
        torch.testing.assert_close(compiled(x, w), f(x, w))
        assert torch._dynamo.backends.registry.lookup_backend("thunder") is thunder.dynamo.thunder_backend
        # options= reaches ThunderCompiler
        opts = torch.compile(f, backend="thunder", options={"fallback": "eager"})
        torch.testing.assert_close(opts(x, w), f(x, w))
        print("calls", len(calls))
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "calls 2" in proc.stdout, proc.stdout


def test_thunder_backend_rejects_a_mode():
    from thunder.dynamo import thunder_backend

    gm = torch.fx.symbolic_trace(torch.nn.ReLU())
    with pytest.raises(ValueError, match="mode='max-autotune'"):
        thunder_backend(gm, [torch.randn(2)], mode="max-autotune")


def test_checker_comparing_with_torch_dtypes():
    # a checker receives proxies whose .dtype is a thunder dtype; comparing it with torch dtypes works
    import thunder.torch as ltorch
    from thunder.core import dtypes
    from thunder.core.proxies import TensorProxy
    from thunder.extend import OperatorExecutor

    assert dtypes.float32 == torch.float32 and torch.float32 == dtypes.float32
    assert dtypes.float32 != torch.float64 and dtypes.float32 != dtypes.float64
    assert hash(dtypes.bfloat16) == hash(torch.bfloat16)
    assert dtypes.float32 is not torch.float32  # `is` still compares objects: use ==

    ex = OperatorExecutor("test_dtype_checker_ex")
    calls = []

    def impl(a, b):
        calls.append(a.dtype)
        return torch.mul(a, b)

    op = ex.register_operator("test_dtype_checker_mul", meta=lambda a, b: TensorProxy(like=a), fn=impl)
    seen = []

    def checker(a, b):
        seen.append(a.dtype)
        return a.dtype == torch.float32 and b.dtype in (torch.float32,)

    ex.register_implementation(ltorch.mul, op, checker=checker)
    jfn = thunder.jit(lambda a, b: a * b, executors=[ex])
    for dtype in (torch.float32, torch.float64):
        a, b = torch.randn(3, dtype=dtype), torch.randn(3, dtype=dtype)
        torch.testing.assert_close(jfn(a, b), a * b)
    assert calls == [torch.float32]  # taken for float32 only
    assert all(isinstance(d, dtypes.dtype) for d in seen)


def test_symbol_signature():
    import inspect

    import thunder.torch as ltorch
    from thunder.core import prims
    from thunder.core.proxies import TensorProxy
    from thunder.extend import OperatorExecutor

    assert list(inspect.signature(ltorch.silu).parameters) == ["a", "inplace"]
    assert list(inspect.signature(prims.add).parameters) == ["a", "b"]

    def like(x, scale: float = 2.0):
        return x * scale

    op = OperatorExecutor("test_signature_ex").register_operator("test_sig", like=like, fn=lambda x, scale=2.0: x)
    assert str(inspect.signature(op)) == "(x, scale: 'float' = 2.0)"
    meta_op = OperatorExecutor("test_signature_ex2").register_operator(
        "test_sig2", meta=lambda a, b: TensorProxy(like=a), fn=lambda a, b: a
    )
    assert list(inspect.signature(meta_op).parameters) == ["a", "b"]
