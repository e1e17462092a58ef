"""The GPU-day plan's checks (tools/gpu/plan.py) catch what would waste a GPU session, and pass on the real plan."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import plan  # noqa: E402
from plan import Call, Stage  # noqa: E402


def _stage(name: str, timeout_s: int, **kw) -> Stage:
    return Stage(name, ("{py}", "-c", "pass"), timeout_s, "test stage", **kw)


def _install() -> Stage:
    return _stage("install", 10)


def test_the_real_plan_fits_the_device_limits():
    assert plan.check_plan() == []
    day = sum(c.stage_seconds for c in plan.GPU_DAY)
    assert day <= 12 * 60
    assert all(c.timeout_s <= 600 for c in plan.CALLS.values())
    # each call's stages are in priority order and begin with the install a fresh machine needs
    assert [c.stages[0].name for c in plan.CALLS.values()] == ["install"] * len(plan.CALLS)
    assert [s.name for s in plan.CALL1.stages][2] == "triton_tests"


def test_a_call_over_the_per_command_limit_is_reported():
    big = Call("big", (plan.DEPS,), (_install(), _stage("slow", 715)), "now")
    problems = plan.check_plan(calls=(big,), gpu_day=(big,))
    assert any("over the 600 s per call" in p for p in problems), problems
    assert any("over 720 s" in p for p in problems), problems


def test_two_calls_that_outlast_the_device_budget_are_reported():
    # each call fits its 600 s, the stages fit 720 s, but start + calls + transfers + idle pass 900 s
    a = Call("a", (plan.DEPS,), (_install(), _stage("x", 350)), "now")
    b = Call("b", (plan.DEPS,), (_install(), _stage("y", 350)), "then")
    problems = plan.check_plan(calls=(a, b), gpu_day=(a, b))
    assert any("of device time" in p for p in problems), problems


def test_stage_needs_must_name_an_earlier_stage_and_scripts_must_exist():
    bad = Call(
        "bad",
        (plan.DEPS,),
        (
            _install(),
            _stage("late", 5, needs=("later",)),
            Stage("missing", ("{py}", "benchmarks/no_such_benchmark.py"), 5, "x"),
            _stage("later", 5),
        ),
        "now",
    )
    problems = plan.check_plan(calls=(bad,), gpu_day=(bad,))
    assert any("needs 'later', which is not an earlier stage" in p for p in problems), problems
    assert any("benchmarks/no_such_benchmark.py does not exist" in p for p in problems), problems


def test_a_second_call_must_install_first_and_carry_only_prepared_files():
    a = Call("a", (plan.DEPS,), (_install(),), "now")
    b = Call("b", ("somewhere/else",), (_stage("run", 5),), "then")
    problems = plan.check_plan(calls=(a, b), gpu_day=(a, b))
    assert any("b: must start by installing" in p for p in problems), problems
    assert any("b: carries paths outside .gpu/" in p for p in problems), problems


def _wheel(folder: Path, name: str) -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
    return path


@pytest.mark.parametrize(
    "name",
    [
        "optree-0.20.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
        "litgpt-0.5.13-py3-none-any.whl",
        "nvfuser_cu130_torch210-0.2.36.dev20260301-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl",
    ],
)
def test_wheels_for_cpython_312_on_x86_64_pass(tmp_path, name):
    assert plan.wheel_tag_problem(_wheel(tmp_path, name)) is None


@pytest.mark.parametrize(
    "name, why",
    [
        ("optree-0.20.0-cp311-cp311-manylinux_2_27_x86_64.whl", "not for CPython 3.12"),
        ("optree-0.20.0-cp312-cp312-manylinux_2_27_aarch64.whl", "not x86-64"),
        ("optree-0.20.0-cp312-cp312-macosx_11_0_arm64.whl", "not x86-64"),
        ("optree-0.20.0-cp312-cp312-manylinux_2_41_x86_64.whl", "newer than the device's"),
        ("optree.whl", "not a wheel file name"),
    ],
)
def test_wheels_for_another_python_or_machine_are_reported(tmp_path, name, why):
    problem = plan.wheel_tag_problem(_wheel(tmp_path, name))
    assert problem is not None and why in problem, problem


def test_a_broken_wheel_is_reported(tmp_path):
    path = tmp_path / "litgpt-0.5.13-py3-none-any.whl"
    path.write_bytes(b"not a zip")
    assert "not a readable zip" in plan.wheel_tag_problem(path)


def _repo(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text(".gpu/\n")
    (tmp_path / "README.md").write_text("x" * 1000)
    return tmp_path


def test_artefacts_missing_are_reported_with_the_fix(tmp_path):
    root = _repo(tmp_path)
    call = Call("c", (plan.DEPS,), (_install(),), "now", needs_files=(f"{plan.DEPS}/*.whl",))
    problems, sizes = plan.check_artefacts(calls=(call,), root=root)
    assert problems == [f"c: missing {plan.DEPS}/*.whl (run tools/gpu/prepare.sh)"]
    assert sizes == {}


def test_a_carry_over_64_mib_with_the_working_tree_is_reported(tmp_path):
    root = _repo(tmp_path)
    deps = root / plan.DEPS
    deps.mkdir(parents=True)
    _wheel(deps, "litgpt-0.5.13-py3-none-any.whl")
    part = root / ".gpu" / "c" / "nvfuser.part-a"
    part.parent.mkdir(parents=True)
    with open(part, "wb") as f:  # sparse: 64 MiB of size, no disk
        f.truncate(64 * plan.MIB)
    call = Call("c", (plan.DEPS, ".gpu/c"), (_install(),), "now", needs_files=(f"{plan.DEPS}/*.whl",))
    problems, sizes = plan.check_artefacts(calls=(call,), root=root)
    assert sizes["c"]["working_tree"] == (root / "README.md").stat().st_size + (root / ".gitignore").stat().st_size
    assert sizes["c"]["carry"] == 64 * plan.MIB + (deps / "litgpt-0.5.13-py3-none-any.whl").stat().st_size
    assert len(problems) == 1 and "over 64 MiB" in problems[0], problems


def test_two_versions_of_one_wheel_are_reported(tmp_path):
    root = _repo(tmp_path)
    deps = root / plan.DEPS
    deps.mkdir(parents=True)
    _wheel(deps, "pytest-9.2.0-py3-none-any.whl")
    _wheel(deps, "pytest-9.1.0-py3-none-any.whl")
    call = Call("c", (plan.DEPS,), (_install(),), "now", needs_files=(f"{plan.DEPS}/*.whl",))
    problems, _ = plan.check_artefacts(calls=(call,), root=root)
    assert any("two wheels of pytest" in p for p in problems), problems


def test_tool_calls_name_each_call_with_its_carry_and_timeout():
    text = plan.tool_calls()
    for call in plan.CALLS.values():
        assert f'"command": "{call.command}"' in text
        assert f'"timeout_s": {call.timeout_s}' in text
        assert len(call.command) <= 2000


def test_check_commands_reports_an_option_a_benchmark_does_not_have():
    good = Stage("ok", ("{py}", "benchmarks/triton_swiglu.py", "--iters", "3", "--json-out", "x.json"), 5, "x")
    bad = Stage("bad", ("{py}", "benchmarks/triton_swiglu.py", "--no-such-option", "1"), 5, "x")
    problems = plan.check_commands(calls=(Call("c", (), (good, bad), "now"),))
    assert problems == ["c/bad: benchmarks/triton_swiglu.py has no option --no-such-option (see its --help)"]


def test_check_commands_reports_a_test_path_that_does_not_collect(tmp_path):
    stage = Stage("t", ("{py}", "-m", "pytest", "packages/no-such-package/tests", "-n", "4"), 5, "x")
    problems = plan.check_commands(calls=(Call("c", (), (stage,), "now"),))
    assert len(problems) == 1 and problems[0].startswith("c/t: -m pytest packages/no-such-package/tests -n 0"), problems


def test_an_apex_tarball_without_the_extension_sources_is_reported(tmp_path):
    import io
    import tarfile

    from build_apex import REQUIRED_FILES

    root = _repo(tmp_path)
    folder = root / ".gpu" / "apex"
    folder.mkdir(parents=True)
    with tarfile.open(folder / "apex-src.tar.gz", "w:gz") as tar:
        for name in REQUIRED_FILES:
            if name != "csrc/layer_norm_cuda_kernel.cu":
                info = tarfile.TarInfo(name)
                tar.addfile(info, io.BytesIO(b""))
    call = Call("apex", (".gpu/apex",), (_install(),), "later", needs_files=(".gpu/apex/apex-src.tar.gz",))
    problems, _ = plan.check_artefacts(calls=(call,), root=root)
    assert problems == [
        "apex: apex-src.tar.gz lacks csrc/layer_norm_cuda_kernel.cu (remake it with tools/gpu/prepare.sh)"
    ]


def test_the_docs_give_each_call_and_stage_with_the_plans_timeouts():
    text = (plan.ROOT / "docs" / "gpu-day.md").read_text()
    for call in plan.CALLS.values():
        carry = ", ".join(f'"{c}"' for c in call.carry)
        assert f"| `{call.command}` | `[{carry}]` | {call.timeout_s} |" in text, call.name
        for stage in call.stages:
            if stage.name.startswith("triton_") and call.name == "call1" and stage.name != "triton_tests":
                continue  # the five benchmark stages share one row
            assert f"| {call.name} | `{stage.name}` | {stage.timeout_s} s |" in text, (call.name, stage.name)
