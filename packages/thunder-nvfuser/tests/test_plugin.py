"""The package installs and imports without nvFuser or CUDA, and says why it contributes nothing."""

from __future__ import annotations

import io
import subprocess
import sys

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
def test_unavailable_here_with_both_reasons():
    reason = plugin.thunder_unavailable_reason()
    assert "nvFuser is not installed" in reason
    assert "no CUDA device" in reason
    assert plugin.thunder_executors() == []


@needs_no_nvfuser_here
def test_report_and_discover_omit_it():
    infos = {i.name: i for i in thunder.plugins.plugin_infos(reload=True)}
    assert "nvfuser" in infos, "install for development: pip install --no-deps -e packages/thunder-nvfuser"
    info = infos["nvfuser"]
    assert info.distribution == "thunder-nvfuser"
    assert info.executors == [] and info.error is None
    assert "nvFuser is not installed" in info.unavailable_reason
    buf = io.StringIO()
    thunder.plugins.report(file=buf)
    text = buf.getvalue()
    assert "- nvfuser (thunder-nvfuser 0.1.0): contributed nothing: nvFuser is not installed" in text
    assert all(ex.name != "nvfuser" for ex in thunder.discover(reload=True))


def test_reasons_name_what_is_missing(monkeypatch):
    monkeypatch.setattr(runtime, "_nvfuser_installed", lambda: True)
    monkeypatch.setattr(runtime.torch.version, "cuda", "13.0")
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: False)
    assert runtime.unavailable_reason() == "no CUDA device: torch.cuda.is_available() is False"

    monkeypatch.setattr(runtime, "_nvfuser_installed", lambda: False)
    monkeypatch.setattr(runtime.torch.cuda, "is_available", lambda: True)
    reason = runtime.unavailable_reason()
    assert reason.startswith("nvFuser is not installed") and "no CUDA device" not in reason


def test_suggested_wheel_follows_torch_and_cuda():
    assert runtime.suggested_wheel("2.10.0+cu130", "13.0") == "nvfuser-cu130-torch210"
    assert runtime.suggested_wheel("2.9.1", "12.8") == "nvfuser-cu128-torch29"
    assert runtime.install_hint("2.10.0", "12.6") == "pip install nvfuser-cu126-torch210"
    hint = runtime.install_hint("2.11.0+cu130", "13.0")
    assert "no nvFuser wheel is known for torch 2.11.0+cu130" in hint and "nvfuser-cu130-torch211" in hint


def test_version_checks_name_the_wheel():
    runtime.check_versions("0.2.36", torch_version="2.10.0", distribution="nvfuser-cu130-torch210")
    with pytest.raises(runtime.NvFuserVersionError, match=r"built for torch 2\.10, but torch 2\.9\.0 is running"):
        runtime.check_versions("0.2.36", torch_version="2.9.0", distribution="nvfuser-cu130-torch210")
    with pytest.raises(runtime.NvFuserVersionError, match=r"pip install nvfuser-cu130-torch29"):
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
