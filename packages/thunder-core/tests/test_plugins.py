"""Plugin discovery: the example package, broken and unavailable plugins, ordering, the report."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import types
import warnings
from pathlib import Path

import pytest
import torch

import thunder
import thunder.plugins as plugins
from thunder.extend import OperatorExecutor
from thunder.plugins import hookimpl

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "thunder-example-executor"


def _fake_distribution(root: Path, dist: str, version: str, entry_points: dict[str, str], modules: dict[str, str]):
    """A minimal installed distribution: ``<dist>-<version>.dist-info`` with entry points, plus modules."""
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    eps = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[thunder]\n{eps}")
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory) -> Path:
    """The example package installed into a temporary target, beside three fake plugins."""
    root = tmp_path_factory.mktemp("site")
    # build from a copy so the checkout gets no build/ or egg-info folders
    src = root / "_src"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = root / "site-packages"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", target, src],
        check=True,
        capture_output=True,
    )
    _fake_distribution(
        target,
        "broken-plugin",
        "0.0.1",
        {"broken": "broken_plugin"},
        {"broken_plugin": "raise RuntimeError('boom: this plugin cannot import')\n"},
    )
    _fake_distribution(
        target,
        "nofuser-plugin",
        "2.0",
        {"nofuser": "nofuser_plugin"},
        {
            "nofuser_plugin": """
            from thunder.plugins import hookimpl

            @hookimpl
            def thunder_executors():
                return []

            @hookimpl
            def thunder_unavailable_reason():
                return "nvFuser is not installed"
            """
        },
    )
    _fake_distribution(
        target,
        "raising-hook-plugin",
        "0.3",
        {"raising": "raising_plugin"},
        {
            "raising_plugin": """
            from thunder.plugins import hookimpl

            @hookimpl
            def thunder_executors():
                raise ValueError("no executors today")
            """
        },
    )
    return target


_SCRIPT = r"""
import io, json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    import thunder
    loaded_before = "thunder_example_executor.plugin" in sys.modules
    executors = thunder.discover()
    again = thunder.discover()
buf = io.StringIO()
thunder.plugins.report(file=buf)
jfn = thunder.jit(lambda a, b: a * b, executors=executors)
a, b = torch.randn(3, 4), torch.randn(3, 4)
out = jfn(a, b)
print(json.dumps({
    "loaded_before": loaded_before,
    "names": [ex.name for ex in executors],
    "same_again": [ex.name for ex in again] == [ex.name for ex in executors],
    "warnings": [str(w.message) for w in caught if issubclass(w.category, thunder.plugins.ThunderPluginWarning)],
    "report": buf.getvalue(),
    "trace": str(thunder.last_traces(jfn)[-1]),
    "correct": bool(torch.equal(out, a * b)),
    "by_name": thunder.extend.get_executor("example") is executors[0],
    "inductor_imported": "torch._inductor" in sys.modules,
    "dynamo_imported": "torch._dynamo" in sys.modules,
    "cuda_initialized": torch.cuda.is_initialized(),
}))
"""


def _run(site: Path, code: str, **env) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd=site)


def test_discover_installed_plugins(site_dir):
    proc = _run(site_dir, _SCRIPT)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])

    # plugins load on discover(), not on import
    assert not result["loaded_before"]
    # the example's executor first, then the defaults; broken and unavailable plugins contribute nothing
    # (plugins installed in the surrounding environment, if any, may sit between them)
    defaults = [ex.name for ex in thunder.get_default_executors()]
    assert result["names"][0] == "example" and result["names"][-len(defaults) :] == defaults
    assert result["same_again"] and result["by_name"]

    # one warning for each broken plugin, naming it and its error; none for the unavailable one
    warns = result["warnings"]
    assert len(warns) == 2, warns
    broken = [w for w in warns if "'broken'" in w]
    raising = [w for w in warns if "'raising'" in w]
    assert len(broken) == 1 and "RuntimeError: boom: this plugin cannot import" in broken[0]
    assert "broken_plugin" in broken[0]
    assert len(raising) == 1 and "ValueError: no executors today" in raising[0]

    # jit(executors=thunder.discover()) uses the plugin's operator
    assert "example_mul(a, b)" in result["trace"]
    assert result["correct"]

    # discovering imported no compiler backends and did not initialise CUDA
    assert not result["inductor_imported"] and not result["dynamo_imported"]
    assert not result["cuda_initialized"]

    report = result["report"]
    found = int(re.search(r"(\d+) found", report).group(1))
    assert found >= 4  # these four, plus whatever the environment has installed
    # one line per plugin: what it contributed, or why it contributed nothing
    lines = report.splitlines()
    assert (
        "- example (thunder-example-executor 0.1.0): executor: example (OperatorExecutor, version 0.1.0, priority 10)"
        in lines
    )
    assert (
        "- broken (broken-plugin 0.0.1): skipped: import failed: RuntimeError: boom: this plugin cannot import" in lines
    )
    assert "- nofuser (nofuser-plugin 2.0): contributed nothing: nvFuser is not installed" in lines
    assert (
        "- raising (raising-hook-plugin 0.3): skipped: thunder_executors() failed: ValueError: no executors today"
        in lines
    )
    assert "thunder.discover(): example, " in report


def test_unavailable_example_and_cli(site_dir):
    proc = _run(site_dir, "import runpy; runpy.run_module('thunder.plugins', run_name='__main__')")
    assert proc.returncode == 0, proc.stderr
    assert "executor: example" in proc.stdout

    # the example plugin's runtime "missing": it contributes nothing and says why
    proc = subprocess.run(
        [sys.executable, "-m", "thunder.plugins"],
        capture_output=True,
        text=True,
        cwd=site_dir,
        env=dict(os.environ, PYTHONPATH=str(site_dir), THUNDER_EXAMPLE_EXECUTOR_DISABLE="1"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "contributed nothing: disabled by the THUNDER_EXAMPLE_EXECUTOR_DISABLE environment variable" in proc.stdout
    assert "thunder.discover(): example" not in proc.stdout
    assert "ThunderPluginWarning" in proc.stderr  # the broken plugins still warn, on stderr


# ---------------------------------------------------------------- in-process: plugins registered by hand


class _Unavailable(OperatorExecutor):
    def unavailable_reason(self):
        return "needs a GPU"


def _plugin(name: str, executors=None, executors_error=None, reason=None, transforms=None) -> types.SimpleNamespace:
    ns = types.SimpleNamespace(__name__=name)

    if executors is not None or executors_error is not None:

        @hookimpl
        def thunder_executors():
            if executors_error is not None:
                raise executors_error
            return executors

        ns.thunder_executors = thunder_executors
    if reason is not None:

        @hookimpl
        def thunder_unavailable_reason():
            return reason

        ns.thunder_unavailable_reason = thunder_unavailable_reason
    if transforms is not None:

        @hookimpl
        def thunder_transforms():
            return transforms

        ns.thunder_transforms = thunder_transforms
    return ns


@pytest.fixture
def registered():
    pm = plugins.get_plugin_manager()
    names = []

    def register(name, plugin):
        pm.register(plugin, name=name)
        names.append(name)

    yield register
    for name in names:
        pm.unregister(name=name)
    plugins.discover(reload=True)


def test_priority_order_and_skips(registered):
    low = OperatorExecutor("test_low", version="1")
    high = OperatorExecutor("test_high", version="2", priority=5)
    mid_a = OperatorExecutor("test_mid_a", priority=1)
    mid_b = OperatorExecutor("test_mid_b", priority=1)
    gpu_only = _Unavailable("test_gpu_only", priority=100)
    registered("zz_plugin", _plugin("zz", executors=[mid_a, low]))
    registered("aa_plugin", _plugin("aa", executors=[gpu_only, mid_b, high]))
    registered("bad_type_plugin", _plugin("bad", executors=["not an executor"]))
    registered("t_plugin", _plugin("t", executors=[], reason="only transforms", transforms={"noop": lambda t: t}))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = thunder.discover(reload=True)
    names = [ex.name for ex in found]
    defaults = [ex.name for ex in thunder.get_default_executors()]
    # priority first (higher first); equal priorities in plugin-name order; then the CPU fusion executor where it
    # can run (see below), then the defaults
    cpu_fusion = [ex.name for ex in found if ex.name == "torch_compile"]
    assert names == ["test_high", "test_mid_b", "test_mid_a", "test_low", *cpu_fusion, *defaults]
    assert "test_gpu_only" not in names
    msgs = [str(w.message) for w in caught if issubclass(w.category, plugins.ThunderPluginWarning)]
    assert len(msgs) == 1 and "'bad_type_plugin'" in msgs[0] and "got str" in msgs[0]
    assert thunder.extend.get_executor("test_high") is high
    assert set(plugins.discover_transforms()) == {"noop"}

    buf = io.StringIO()
    plugins.report(file=buf)
    text = buf.getvalue()
    assert "    executor skipped: test_gpu_only: needs a GPU" in text
    assert "executor: test_high (OperatorExecutor, version 2, priority 5)" in text
    assert "- t_plugin: transform: noop" in text.splitlines()
    buf = io.StringIO()
    plugins.report(file=buf, verbose=True)
    assert "    note: only transforms" in buf.getvalue()

    # cached: no second warning without reload
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert thunder.discover() == found
    assert not [w for w in caught if issubclass(w.category, plugins.ThunderPluginWarning)]


def test_discovered_executors_run(registered):
    ex = OperatorExecutor("test_plugin_ex", priority=1)
    calls = []

    def impl(a):
        calls.append(a.shape)
        return torch.neg(a)

    from thunder.core.proxies import TensorProxy

    neg = ex.register_operator("test_plugin_neg", meta=lambda a: TensorProxy(like=a), fn=impl)
    import thunder.torch as ltorch

    ex.register_implementation(ltorch.neg, neg)
    registered("neg_plugin", _plugin("neg", executors=[ex]))
    jfn = thunder.jit(lambda a: -a, executors=thunder.discover(reload=True))
    a = torch.randn(2, 3)
    torch.testing.assert_close(jfn(a), -a)
    assert calls == [torch.Size([2, 3])]
    assert "test_plugin_neg(a)" in str(thunder.last_traces(jfn)[-1])
    # and by name
    jfn2 = thunder.jit(lambda a: -a, executors=["test_plugin_ex"])
    jfn2(a)
    assert len(calls) == 2


def test_report_one_short_line_per_unavailable_plugin(registered):
    long_reason = "no CUDA device (PyTorch is a CPU-only build); nvFuser is not installed (see its README)"
    registered("gpu_plugin", _plugin("gpu", executors=[], reason=long_reason))
    registered("only_skipped", _plugin("skip", executors=[_Unavailable("test_skipped_ex")]))
    plugins.discover(reload=True)
    buf = io.StringIO()
    plugins.report(file=buf)
    lines = buf.getvalue().splitlines()
    # the leading clause only, on the plugin's own line; the full reason with --verbose
    assert "- gpu_plugin: contributed nothing: no CUDA device" in lines
    assert "- only_skipped: contributed nothing: needs a GPU" in lines
    assert lines[-1] == "(python -m thunder.plugins --verbose prints the full reasons)"
    buf = io.StringIO()
    plugins.report(file=buf, verbose=True)
    assert f"- gpu_plugin: contributed nothing: {long_reason}" in buf.getvalue().splitlines()


@pytest.mark.parametrize(
    "result, expected_executors, message",
    [
        (None, [], "thunder_executors() returned None"),
        ("single", ["test_single_ex"], "returned the executor 'test_single_ex' instead of a list"),
    ],
)
def test_sloppy_executors_hook_warns_naming_the_plugin(registered, result, expected_executors, message):
    ex = OperatorExecutor("test_single_ex")
    ns = types.SimpleNamespace(__name__="sloppy")

    @hookimpl
    def thunder_executors():
        return ex if result == "single" else result

    ns.thunder_executors = thunder_executors
    registered("sloppy_plugin", ns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = [e.name for e in thunder.discover(reload=True)]
    msgs = [str(w.message) for w in caught if issubclass(w.category, plugins.ThunderPluginWarning)]
    assert len(msgs) == 1 and "'sloppy_plugin'" in msgs[0] and message in msgs[0], msgs
    assert [n for n in found if n.startswith("test_")] == expected_executors
    # a usable result is used: the plugin is not marked as failed
    (info,) = [i for i in plugins.plugin_infos() if i.name == "sloppy_plugin"]
    assert info.error is None


def test_non_string_reason_and_none_transforms_warn(registered):
    class Reason:
        def __str__(self):
            return "driver too old"

    registered("odd_plugin", _plugin("odd", executors=[], reason=Reason(), transforms=None))
    pm = plugins.get_plugin_manager()
    ns = types.SimpleNamespace(__name__="none_transforms")

    @hookimpl
    def thunder_transforms():
        return None

    ns.thunder_transforms = thunder_transforms
    registered("none_transforms_plugin", ns)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thunder.discover(reload=True)
    msgs = [str(w.message) for w in caught if issubclass(w.category, plugins.ThunderPluginWarning)]
    assert any("'odd_plugin'" in m and "returned a Reason, not a str" in m for m in msgs), msgs
    assert any("'none_transforms_plugin'" in m and "thunder_transforms() returned None" in m for m in msgs), msgs
    (info,) = [i for i in plugins.plugin_infos() if i.name == "odd_plugin"]
    assert info.unavailable_reason == "driver too old"
    assert pm.get_plugin("none_transforms_plugin") is ns


def test_hookspecs_help_shows_the_hooks():
    import pydoc

    text = pydoc.render_doc(plugins.hookspecs, renderer=pydoc.plaintext)
    for hook in ("thunder_executors", "thunder_unavailable_reason", "thunder_transforms", "thunder_distributed"):
        assert hook in text.split("FUNCTIONS", 1)[-1], hook


_CPU_FUSION = thunder.extend.get_executor("torch_compile")
_cpu_fusion_here = pytest.mark.skipif(
    torch.cuda.is_available() or _CPU_FUSION.unavailable_reason() is not None,
    reason="discover() adds torch_compile only on a machine without CUDA that has a C++ compiler",
)


@_cpu_fusion_here
def test_discover_adds_the_cpu_fusion_executor_before_the_defaults():
    names = [ex.name for ex in thunder.discover()]
    defaults = [ex.name for ex in thunder.get_default_executors()]
    assert names[-len(defaults) - 1 :] == ["torch_compile", *defaults]
    assert "torch_compile" not in defaults  # plain thunder.jit(fn) does not fuse


@_cpu_fusion_here
def test_discover_leaves_the_cpu_fusion_executor_out_when_a_plugin_fuses(registered):
    from thunder.extend import FusionExecutor

    registered("fusing_plugin", _plugin("fusing", executors=[FusionExecutor("test_plugin_fuser", priority=3)]))
    names = [ex.name for ex in thunder.discover(reload=True)]
    assert "test_plugin_fuser" in names and "torch_compile" not in names


def test_discover_leaves_the_cpu_fusion_executor_out_silently_without_a_cxx_compiler(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-for-thunder")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        names = [ex.name for ex in thunder.discover()]
    assert "torch_compile" not in names
    assert not caught, [str(w.message) for w in caught]
    buf = io.StringIO()
    plugins.report(file=buf)
    assert (
        "CPU fusion (torch_compile) left out of thunder.discover(): Inductor's CPU backend needs a C++ compiler, "
        "and 'no-such-compiler-for-thunder' ($CXX) is not on PATH" in buf.getvalue().splitlines()
    )
