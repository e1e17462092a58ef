"""The package installs and imports without nvFuser or CUDA, and says why it contributes nothing."""

from __future__ import annotations

import io
import subprocess
import sys
import types

import pytest
import torch

import thunder
import thunder.plugins
import thunder_nvfuser
from thunder_nvfuser import plugin, runtime

needs_no_nvfuser_here = pytest.mark.skipif(
    torch.cuda.is_available() or runtime.nvfuser_unavailable_reason() is None,
    reason="checks the report of a machine without CUDA or nvFuser",
)


def test_import_does_not_import_nvfuser_or_the_executor():
    code = (
        "import sys, thunder, thunder_nvfuser, thunder_nvfuser.plugin; "
        "print('nvfuser' in sys.modules, 'thunder_nvfuser.executor' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.split() == ["False", "False"]
    assert thunder_nvfuser.__version__ == "0.1.0"


@needs_no_nvfuser_here
def test_unavailable_here_in_one_line():
    reason = plugin.thunder_unavailable_reason()
    assert reason == runtime.unavailable_reason()
    assert "\n" not in reason
    if torch.version.cuda is None:
        assert reason.startswith(f"CPU-only torch {torch.__version__}: ")
    else:
        assert reason.startswith("no CUDA device")
    assert plugin.thunder_executors() == []


@needs_no_nvfuser_here
def test_report_and_discover_omit_it():
    infos = {i.name: i for i in thunder.plugins.plugin_infos(reload=True)}
    assert "nvfuser" in infos, "install for development: pip install --no-deps -e packages/thunder-nvfuser"
    info = infos["nvfuser"]
    assert info.distribution == "thunder-nvfuser"
    assert info.executors == [] and info.error is None
    assert info.unavailable_reason == runtime.unavailable_reason()
    buf = io.StringIO()
    thunder.plugins.report(file=buf)
    text = buf.getvalue()
    # one line per plugin, the reason's leading clause; --verbose (verbose=True) prints all of it
    assert "- nvfuser (thunder-nvfuser 0.1.0): contributed nothing: " in text
    full = io.StringIO()
    thunder.plugins.report(file=full, verbose=True)
    assert f"- nvfuser (thunder-nvfuser 0.1.0): contributed nothing: {runtime.unavailable_reason()}" in full.getvalue()
    assert all(ex.name != "nvfuser" for ex in thunder.discover(reload=True))


class _Machine:
    """Simulates a machine for ``runtime``: torch build and version, CUDA device, installed nvFuser."""

    def __init__(self, monkeypatch):
        self.mp = monkeypatch
        self.torch("2.10.0+cu130", "13.0")
        self.device(True)
        self.nvfuser(None)

    def torch(self, version: str, cuda: str | None):
        self.mp.setattr(runtime.torch, "__version__", version)
        self.mp.setattr(runtime.torch.version, "cuda", cuda)

    def device(self, present: bool):
        self.mp.setattr(runtime.torch.cuda, "is_available", lambda: present)

    def nvfuser(self, distribution: str | None, module: str = "nvfuser_direct", load=None):
        """``distribution`` as the wheel's metadata spells it (``nvfuser_cu130_torch210``) or ``None``."""
        self.mp.setattr(runtime, "installed_module", lambda: None if distribution is None else module)
        self.mp.setattr(
            runtime.importlib.metadata,
            "packages_distributions",
            lambda: {} if distribution is None else {module: [distribution]},
        )
        self.mp.setattr(runtime.importlib, "import_module", load or (lambda name: pytest.fail(f"imported {name}")))


def _one_line(reason: str) -> str:
    assert reason is not None and "\n" not in reason and len(reason) < 250, reason
    return reason


def test_reason_cpu_only_torch_comes_first(monkeypatch):
    m = _Machine(monkeypatch)
    m.torch("2.13.0+cpu", None)
    m.device(False)
    m.nvfuser("nvfuser_cu130_torch210")  # installed or not: the CPU-only torch decides
    reason = _one_line(runtime.unavailable_reason())
    assert reason.startswith("CPU-only torch 2.13.0+cpu: install torch 2.10 for CUDA")
    assert reason.endswith("then pip install --pre nvfuser-cu130-torch210")


def test_reason_no_cuda_device(monkeypatch):
    m = _Machine(monkeypatch)
    m.device(False)
    reason = _one_line(runtime.unavailable_reason())
    assert reason.startswith("no CUDA device (torch.cuda.is_available() is False with torch 2.10.0+cu130): ")
    assert "NVIDIA GPU" in reason


def test_reason_not_installed_names_the_wheel_for_this_torch(monkeypatch):
    m = _Machine(monkeypatch)
    m.torch("2.10.0+cu128", "12.8")
    assert _one_line(runtime.unavailable_reason()) == "nvFuser not installed: pip install --pre nvfuser-cu128-torch210"
    m.torch("2.11.0+cu130", "13.0")  # no wheel for it: the fix is torch 2.10 and its wheel
    reason = _one_line(runtime.unavailable_reason())
    assert reason.startswith("nvFuser not installed: no nvFuser wheel for torch 2.11.0: pip install 'torch==2.10.*'")
    assert reason.endswith("pip install --pre nvfuser-cu130-torch210")


def test_reason_wheel_for_another_torch_without_importing_it(monkeypatch):
    m = _Machine(monkeypatch)
    m.torch("2.11.0+cu130", "13.0")
    m.nvfuser("nvfuser_cu130_torch210")  # importing it would fail the test
    reason = _one_line(runtime.unavailable_reason())
    assert reason == (
        "nvFuser wheel nvfuser-cu130-torch210 is built for torch 2.10, not 2.11.0+cu130: "
        "pip install 'torch==2.10.*' --index-url https://download.pytorch.org/whl/cu130"
    )
    monkeypatch.setenv(runtime.ALLOW_MISMATCH_ENV, "1")  # try it anyway: importing it decides
    m.nvfuser("nvfuser_cu130_torch210", load=lambda name: types.SimpleNamespace(__version__="0.2.36"))
    assert runtime.unavailable_reason() is None
    monkeypatch.delenv(runtime.ALLOW_MISMATCH_ENV)
    m.nvfuser("nvfuser_cu130_torch210")
    m.torch("2.9.1+cu128", "12.8")  # a wheel exists for this torch: swap the wheel
    assert _one_line(runtime.unavailable_reason()) == (
        "nvFuser wheel nvfuser-cu130-torch210 is built for torch 2.10, not 2.9.1+cu128: "
        "pip uninstall -y nvfuser-cu130-torch210 && pip install --pre nvfuser-cu128-torch29"
    )


def test_reason_import_failure_and_success(monkeypatch):
    m = _Machine(monkeypatch)

    def fails(name):
        raise ImportError(f"{name}/_C_DIRECT.so: undefined symbol: _ZN3c104cuda9SetDeviceEa\nmore")

    m.nvfuser("nvfuser_cu130_torch210", load=fails)
    reason = _one_line(runtime.unavailable_reason())
    assert reason.startswith("nvfuser_direct (nvfuser-cu130-torch210) fails to import with torch 2.10.0+cu130 ")
    assert "undefined symbol" in reason and reason.endswith("pip install --pre nvfuser-cu130-torch210")

    loaded = []
    m.nvfuser(
        "nvfuser_cu130_torch210", load=lambda name: loaded.append(name) or types.SimpleNamespace(__version__="0.2.36")
    )
    assert runtime.unavailable_reason() is None and loaded == ["nvfuser_direct"]
    # the legacy module of older wheels is the fallback
    loaded.clear()
    m.nvfuser(
        "nvfuser_cu128_torch29",
        module="nvfuser",
        load=lambda name: loaded.append(name) or types.SimpleNamespace(__version__="0.2.30"),
    )
    m.torch("2.9.1+cu128", "12.8")
    assert runtime.unavailable_reason() is None and loaded == ["nvfuser"]


def test_suggested_wheel_follows_torch_and_cuda():
    assert runtime.suggested_wheel("2.10.0+cu130", "13.0") == "nvfuser-cu130-torch210"
    assert runtime.suggested_wheel("2.9.1", "12.8") == "nvfuser-cu128-torch29"
    assert runtime.install_hint("2.10.0", "12.6") == "pip install --pre nvfuser-cu126-torch210"
    hint = runtime.install_hint("2.11.0+cu130", "13.0")
    assert hint.startswith("no nvFuser wheel for torch 2.11.0: ") and hint.endswith("nvfuser-cu130-torch210")


def test_version_checks_name_the_wheel():
    runtime.check_versions("0.2.36", torch_version="2.10.0", distribution="nvfuser-cu130-torch210")
    runtime.check_versions("0.2.36", torch_version="2.10.0", distribution="nvfuser_cu130_torch210")
    with pytest.raises(runtime.NvFuserVersionError, match=r"built for torch 2\.10, not 2\.9\.0"):
        runtime.check_versions("0.2.36", torch_version="2.9.0", distribution="nvfuser-cu130-torch210")
    with pytest.raises(runtime.NvFuserVersionError, match=r"pip install --pre nvfuser-cu130-torch29"):
        runtime.check_versions("0.2.36", torch_version="2.9.0", distribution="nvfuser-cu130-torch210")
    with pytest.raises(runtime.NvFuserVersionError, match=r"needs nvFuser >= 0\.2\.0, found 0\.1\.6"):
        runtime.check_versions("0.1.6.dev20240313", torch_version="2.10.0", distribution="nvfuser-cu121-torch210")
    with pytest.raises(runtime.NvFuserVersionError, match=r"needs torch >= 2\.4"):
        runtime.check_versions("0.2.36", torch_version="2.3.1", distribution="nvfuser-cu121-torch23")
    # an unsuffixed (nightly) wheel: only the version is checked
    runtime.check_versions("0.2.36+gitabc1234", torch_version="2.11.0", distribution="nvfuser-cu130")


def test_executor_options_are_checked():
    from thunder_nvfuser.executor import NvFuserExecutor

    with pytest.raises(ValueError, match="unknown nvfuser executor options"):
        NvFuserExecutor(options=("sdpa",))


def test_extras_name_published_wheels_with_a_prerelease_bound():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    from pathlib import Path

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    extras = {k: v for k, v in pyproject["project"]["optional-dependencies"].items() if k != "test"}
    assert [Requirement(r).name for r in extras["nvfuser"]] == [runtime.DEFAULT_WHEEL]
    for name, reqs in extras.items():
        for req in map(Requirement, reqs):
            assert req.name in runtime.PUBLISHED_WHEELS, (name, req.name)
            # a pre-release in the specifier lets pip take the (pre-release only) wheels without --pre
            assert any(s.version and "dev" in s.version for s in req.specifier), (name, str(req))
            if name != "nvfuser":
                assert req.name == f"nvfuser-{name}"
