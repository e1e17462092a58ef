"""The GPU-day plan: which device calls to make, which stages each runs, and the checks of the plan.

A lent GPU session has 15 minutes of device time in all (the machine's start included), at most
10 minutes per command, 64 MiB of working tree plus carried files per call, and a machine that
goes back 30 s after a call ends. This module is the single description of how that time is
spent (see docs/gpu-day.md):

- ``call1`` and ``call2`` are made one right after the other on one warm machine. call1 runs the
  Triton stages and leaves the first half of the nvFuser wheel in ``/tmp/gpu-day``; call2 brings
  the second half, joins them, and runs the nvFuser stages and the whole training step.
- ``apex`` is a third call, for a later session (or this one if enough device time is left): it
  builds apex's xentropy and fused layer-norm extensions and runs thunder-apex's ``apex_cuda``
  tests.

Every stage has its own timeout; the stages of a call never add up to more than the call's
limit, so one slow stage cannot eat the budget of the ones after it.

Run on the CPU (CI does, through the ``gpu-plan`` tox env): ``python tools/gpu/plan.py
--dry-run`` checks that every stage's command resolves, that the timeouts fit the device
limits, and, when ``tools/gpu/prepare.sh`` has fetched them, that the carried files are there,
fit 64 MiB per call together with the working tree, and are wheels for CPython 3.12 on x86-64;
``--commands`` also collects the stages' tests and checks the benchmarks' options.
``python tools/gpu/plan.py --tool-calls`` prints the device tool calls to make.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))  # build_apex, beside this file
CARRY_DIR = ".gpu"  # git-ignored: what prepare.sh fetches and the calls carry
DEPS = f"{CARRY_DIR}/deps"  # dependency wheels, carried by every call

# The device's limits (see docs/gpu-day.md): what the plan must fit.
MIB = 2**20
CARRY_LIMIT_BYTES = 64 * MIB  # working tree + carried paths, per call
MAX_CARRY_PATHS = 8
MAX_COMMAND_CHARS = 2000
CALL_LIMIT_S = 600  # one command's run
DEVICE_BUDGET_S = 900  # the whole session's device time, start and idle included
STAGE_BUDGET_S = 720  # the rule: the stages of the GPU-day calls add up to at most 12 minutes
MACHINE_START_S = 120  # a cold start, as seen (a minute or more)
TRANSFER_S = 20  # copying ~45 MiB there and the results back, per call (an estimate)
WARM_WINDOW_S = 30  # the machine goes back this long after a call ends
CALL_MARGIN_S = 10  # a call's tool timeout over the sum of its stages' timeouts
WHEEL_PYTHON_TAGS = ("cp312", "py3", "py312")
WHEEL_ABI_TAGS = ("cp312", "abi3", "none")
DEVICE_GLIBC_MINOR = 39  # the device image is Ubuntu 24.04 (Python 3.12.3)


@dataclass(frozen=True)
class Stage:
    """One step of a call: a command with its own timeout.

    ``argv`` runs from the repository root; ``{py}`` is the device's python3, ``{work}`` the
    call's scratch folder (``/tmp/gpu-day``), ``{results}`` where stage outputs are collected.
    ``stdout_json`` names the file under ``{results}`` that receives the command's stdout (the
    benchmarks print one JSON object). ``needs`` lists stages that must have succeeded first;
    otherwise this one is skipped, saying why. ``paths`` are repository files the command needs
    (checked by the dry-run); ``pytest_paths`` are the test folders a pytest stage runs.
    """

    name: str
    argv: tuple[str, ...]
    timeout_s: int
    purpose: str
    env: dict = field(default_factory=dict)
    stdout_json: str | None = None
    needs: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    pytest_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Call:
    """One device tool call: its carried paths, its stages in priority order, and when to make it."""

    name: str
    carry: tuple[str, ...]
    stages: tuple[Stage, ...]
    when: str
    # carried files the call needs, relative to the repository root (globs allowed)
    needs_files: tuple[str, ...] = ()

    @property
    def stage_seconds(self) -> int:
        return sum(s.timeout_s for s in self.stages)

    @property
    def timeout_s(self) -> int:
        """The timeout_s to give the device tool: the stages' sum and a margin for the runner."""
        return self.stage_seconds + CALL_MARGIN_S

    @property
    def command(self) -> str:
        return f"bash tools/gpu/run.sh {self.name}"


_BENCH_ARGS = ("--iters", "10", "--warmup", "2")
# The device image's own pytest plugins (pytest-benchmark, -cov, -mock, -timeout) were built for its
# pytest, not the carried pytest 9: load none of them, only xdist (carried too) where -n is used.
_PYTEST_ENV = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _install(*extra: str) -> Stage:
    return Stage(
        "install",
        ("bash", "tools/gpu/install.sh", "{work}", *extra),
        45,
        "install the carried wheels and the thunder packages (no network, --no-deps) into {work}/site",
        paths=("tools/gpu/install.sh",),
    )


def _pytest_stage(
    name: str,
    path: str,
    timeout_s: int,
    purpose: str,
    *,
    select: tuple[str, ...] = (),
    workers: int = 0,
    env: dict | None = None,
    needs: tuple[str, ...] = ("install",),
) -> Stage:
    """A pytest run of ``path`` that writes a JUnit report ``{results}/<name>.xml``.

    ``select`` narrows the tests (``-m``/``-k`` options); ``workers`` > 0 runs them with xdist.
    """
    xdist = ("-p", "xdist.plugin", "-n", str(workers)) if workers else ()
    argv = ("{py}", "-m", "pytest", path, "-q", "-rfEs", "-p", "no:cacheprovider", *xdist, *select)
    return Stage(
        name,
        (*argv, f"--junitxml={{results}}/{name}.xml"),
        timeout_s,
        purpose,
        env={**(env or {}), **_PYTEST_ENV},
        needs=needs,
        pytest_paths=(path,),
    )


def _triton_bench(kernel: str, timeout_s: int) -> Stage:
    script = f"benchmarks/triton_{kernel}.py"
    return Stage(
        f"triton_{kernel}",
        ("{py}", script, *_BENCH_ARGS, "--json-out", f"{{results}}/triton_{kernel}.json"),
        timeout_s,
        f"{kernel}: eager vs torch.compile vs thunder+triton vs Liger, fwd+bwd, time and peak memory",
        needs=("install",),
        paths=(script, "benchmarks/triton_common.py"),
    )


CALL1 = Call(
    "call1",
    carry=(DEPS, f"{CARRY_DIR}/call1"),
    when="first, as soon as the session starts",
    needs_files=(f"{DEPS}/*.whl", f"{CARRY_DIR}/call1/nvfuser.part-a"),
    stages=(
        _install("--stash", f"{CARRY_DIR}/call1/nvfuser.part-a"),
        Stage(
            "probe",
            ("{py}", "tools/gpu/probe.py"),
            30,
            "versions, the GPU, and a thunder.jit function on CUDA against eager",
            stdout_json="probe.json",
            needs=("install",),
            paths=("tools/gpu/probe.py",),
        ),
        _pytest_stage(
            "triton_tests",
            "packages/thunder-triton/tests",
            110,
            "the thunder-triton test suite with the kernels compiled for the GPU",
            workers=8,
            env={"THUNDER_TRITON_TEST_DEVICE": "cuda"},
        ),
        _triton_bench("rms_norm", 40),
        _triton_bench("swiglu", 35),
        _triton_bench("rope", 40),
        _triton_bench("cross_entropy", 40),
        _triton_bench("linear_cross_entropy", 45),
    ),
)

CALL2 = Call(
    "call2",
    carry=(DEPS, f"{CARRY_DIR}/call2"),
    when="at once after call1 returns (within the 30 s warm window: call1 left the wheel's first half there)",
    needs_files=(f"{DEPS}/*.whl", f"{CARRY_DIR}/call2/nvfuser.part-b", f"{CARRY_DIR}/call2/nvfuser.sha256"),
    stages=(
        _install(),
        Stage(
            "nvfuser_join",
            (
                "bash",
                "tools/gpu/install.sh",
                "{work}",
                "--join",
                f"{CARRY_DIR}/call2/nvfuser.part-b",
                f"{CARRY_DIR}/call2/nvfuser.sha256",
            ),
            20,
            "join the nvFuser wheel's halves (call1 left the first in {work}), check its sha256, install it",
            needs=("install",),
            paths=("tools/gpu/install.sh",),
        ),
        Stage(
            "nvfuser_probe",
            ("{py}", "tools/gpu/nvfuser_probe.py"),
            25,
            "does nvfuser_direct (built for torch 2.10) load on this torch, and run a tiny fusion right?",
            stdout_json="nvfuser_probe.json",
            env={"THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH": "1"},
            needs=("nvfuser_join",),
            paths=("tools/gpu/nvfuser_probe.py",),
        ),
        _pytest_stage(
            "nvfuser_tests",
            "packages/thunder-nvfuser/tests",
            70,
            "thunder-nvfuser's tests with the real nvFuser, but the long OpInfo sweep (a later session: gpu_session.sh opinfo)",
            select=("-k", "not test_opinfo_values_and_grads"),
            workers=4,
            env={"THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH": "1"},
            needs=("nvfuser_probe",),
        ),
        Stage(
            "nvfuser_llama",
            ("{py}", "benchmarks/nvfuser_llama.py", "--iters", "5", "--warmup", "2", "--layers", "2"),
            60,
            "LLaMAMLP, RoPE and a 2-layer Llama-2-7b-shaped training step: nvFuser vs eager vs torch.compile",
            env={"THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH": "1"},
            stdout_json="nvfuser_llama.json",
            needs=("nvfuser_probe",),
            paths=("benchmarks/nvfuser_llama.py",),
        ),
        Stage(
            "training_step",
            (
                "{py}",
                "benchmarks/executors_training.py",
                "--device",
                "cuda",
                "--dtype",
                "bfloat16",
                "--config",
                "Llama-2-7b-hf",
                "--layers",
                "4",
                "--batch",
                "1",
                "--seq",
                "2048",
                "--steps",
                "5",
                "--variants",
                "eager",
                "thunder_discover",
                "torch_compile",
                "--json-out",
                "{results}/training_step.json",
            ),
            75,
            "a whole LitGPT training step (bf16, Llama-2-7b-shaped layers): thunder.discover() vs eager vs torch.compile",
            env={"THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH": "1"},
            needs=("install",),
            paths=("benchmarks/executors_training.py",),
        ),
    ),
)

APEX = Call(
    "apex",
    carry=(DEPS, f"{CARRY_DIR}/apex"),
    when="in the next GPU session (or in this one if status shows budget_left_s >= its timeout + 150)",
    needs_files=(f"{DEPS}/*.whl", f"{CARRY_DIR}/apex/apex-src.tar.gz"),
    stages=(
        _install(),
        Stage(
            "apex_build",
            ("{py}", "tools/gpu/build_apex.py", "{work}", f"{CARRY_DIR}/apex/apex-src.tar.gz"),
            300,
            "build only apex's xentropy_cuda and fused_layer_norm_cuda (sm_90, ninja) from the trimmed sources",
            stdout_json="apex_build.json",
            needs=("install",),
            paths=("tools/gpu/build_apex.py",),
        ),
        _pytest_stage(
            "apex_tests",
            "packages/thunder-apex/tests",
            60,
            "thunder-apex's tests, the apex_cuda ones against the real kernels",
            needs=("apex_build",),
        ),
        Stage(
            "triton_step",
            ("{py}", "benchmarks/triton_step.py", *_BENCH_ARGS, "--json-out", "{results}/triton_step.json"),
            80,
            "a LitGPT Llama training step: thunder+triton kernels vs Liger vs eager vs torch.compile",
            needs=("install",),
            paths=("benchmarks/triton_step.py", "benchmarks/triton_common.py"),
        ),
    ),
)


def _stage(call: Call, name: str, **changes) -> Stage:
    """A stage of an earlier call, some fields changed."""
    import dataclasses

    return dataclasses.replace(next(s for s in call.stages if s.name == name), **changes)


def _with_args(stage: Stage, old: tuple[str, ...], new: tuple[str, ...]) -> tuple[str, ...]:
    argv = stage.argv
    i = next(i for i in range(len(argv)) if argv[i : i + len(old)] == old)
    return argv[:i] + new + argv[i + len(old) :]


_TRAINING = next(s for s in CALL2.stages if s.name == "training_step")
_TRITON_STEP = next(s for s in APEX.stages if s.name == "triton_step")

# A second look after the first GPU day (one call, any session with ~5 minutes of device time):
# where thunder's training step loses to eager (thunder alone vs with the triton kernels, and the
# kernels the profiler records), the apex cross-entropy fixed after the first run, and the triton
# step with the default claims decided from the first run's figures.
RECHECK = Call(
    "recheck",
    carry=(DEPS, f"{CARRY_DIR}/apex"),
    when="a later GPU session, one call (or this one's remaining time, with --budget-s)",
    needs_files=(f"{DEPS}/*.whl", f"{CARRY_DIR}/apex/apex-src.tar.gz"),
    stages=(
        _install(),
        _stage(
            CALL2,
            "training_step",
            timeout_s=50,
            argv=_with_args(
                _TRAINING,
                ("eager", "thunder_discover", "torch_compile", "--json-out", "{results}/training_step.json"),
                ("eager", "thunder_default", "thunder_discover", "--json-out", "{results}/training_step_recheck.json"),
            ),
            purpose="the LitGPT training step: eager vs thunder's default executors vs thunder.discover()",
        ),
        _pytest_stage(
            "core_cuda_tests",
            "packages/thunder-core/tests/test_sdpa_executor.py",
            30,
            "thunder-core's CUDA tests: the sdpa executor's CUDA backward kernel (never run before) against eager",
            select=("-m", "cuda"),
        ),
        Stage(
            "profile_step",
            ("{py}", "tools/gpu/profile_step.py", "--layers", "2", "--json-out", "{results}/profile_step.json"),
            50,
            "the kernels of that step (2 layers) per variant, from torch.profiler: where thunder loses",
            needs=("install",),
            paths=("tools/gpu/profile_step.py", "benchmarks/executors_training.py"),
        ),
        _stage(APEX, "apex_build", timeout_s=50),
        _stage(APEX, "apex_tests", timeout_s=35),
        _stage(
            APEX,
            "triton_step",
            timeout_s=55,
            argv=_with_args(
                _TRITON_STEP,
                ("--json-out",),
                ("--variants", "eager", "thunder_default", "thunder_triton", "--json-out"),
            ),
            purpose="the LitGPT step with the default triton claims: eager vs thunder alone vs thunder+triton",
        ),
    ),
)

CALLS = {c.name: c for c in (CALL1, CALL2, APEX, RECHECK)}
GPU_DAY = (CALL1, CALL2)  # the two calls made back to back in the first GPU session


# ----- checks (the dry-run) -----------------------------------------------------------------


def working_tree_bytes(root: Path = ROOT) -> int:
    """Bytes of what travels with every call besides the carry: tracked and untracked-not-ignored files."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    total = 0
    for name in out.decode().split("\0"):
        path = root / name
        if name and path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def _carried_files(call: Call, root: Path) -> list[Path]:
    files = []
    for carried in call.carry:
        path = root / carried
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(p for p in path.rglob("*") if p.is_file())
    return files


def wheel_tag_problem(path: Path) -> str | None:
    """Why the wheel at ``path`` would not install on the device's CPython 3.12 / x86-64, or None."""
    parts = path.name[: -len(".whl")].split("-")
    if len(parts) < 5:
        return f"{path.name}: not a wheel file name (name-version-python-abi-platform.whl)"
    python, abi, platform = parts[-3], parts[-2], parts[-1]
    if not any(tag in WHEEL_PYTHON_TAGS for tag in python.split(".")):
        return f"{path.name}: python tag {python!r} is not for CPython 3.12"
    if not any(tag in WHEEL_ABI_TAGS for tag in abi.split(".")):
        return f"{path.name}: ABI tag {abi!r} does not fit CPython 3.12"
    plats = platform.split(".")
    if not all(p == "any" or p.endswith("x86_64") for p in plats):
        return f"{path.name}: platform tag {platform!r} is not x86-64"
    glibc = [int(p.split("_")[2]) for p in plats if p.startswith("manylinux_2_")]
    if glibc and min(glibc) > DEVICE_GLIBC_MINOR:
        return f"{path.name}: needs glibc 2.{min(glibc)}, newer than the device's 2.{DEVICE_GLIBC_MINOR} ({platform})"
    try:
        with zipfile.ZipFile(path) as zf:
            zf.testzip()
    except zipfile.BadZipFile as e:
        return f"{path.name}: not a readable zip ({e})"
    return None


def apex_sources_problem(path: Path) -> str | None:
    """What the trimmed apex tarball lacks of what tools/gpu/build_apex.py builds from, or None."""
    from build_apex import REQUIRED_FILES

    try:
        with tarfile.open(path) as tar:
            names = set(tar.getnames())
    except (tarfile.TarError, OSError) as e:
        return f"{path.name}: not a readable tarball ({e})"
    missing = [f for f in REQUIRED_FILES if f not in names]
    return f"{path.name} lacks {', '.join(missing)} (remake it with tools/gpu/prepare.sh)" if missing else None


def _format_args(argv: tuple[str, ...]) -> list[str]:
    return [a.format(py="python3", work="/tmp/gpu-day", results="/tmp/gpu-day/results") for a in argv]


def check_plan(calls=tuple(CALLS.values()), gpu_day=GPU_DAY) -> list[str]:
    """The problems of the plan itself (timeouts, commands, carry lists), checkable with no artefacts."""
    problems = []
    for call in calls:
        if call.timeout_s > CALL_LIMIT_S:
            problems.append(
                f"{call.name}: its stages take up to {call.timeout_s} s, over the {CALL_LIMIT_S} s per call"
            )
        if len(call.command) > MAX_COMMAND_CHARS:
            problems.append(f"{call.name}: the command is {len(call.command)} characters, over {MAX_COMMAND_CHARS}")
        if len(call.carry) > MAX_CARRY_PATHS:
            problems.append(f"{call.name}: carries {len(call.carry)} paths, over {MAX_CARRY_PATHS}")
        names = [s.name for s in call.stages]
        if len(set(names)) != len(names):
            problems.append(f"{call.name}: stage names repeat: {names}")
        for i, stage in enumerate(call.stages):
            for need in stage.needs:
                if need not in names[:i]:
                    problems.append(f"{call.name}/{stage.name}: needs {need!r}, which is not an earlier stage")
            if stage.timeout_s <= 0:
                problems.append(f"{call.name}/{stage.name}: timeout {stage.timeout_s} s")
            for rel in stage.paths:
                if not (ROOT / rel).is_file():
                    problems.append(f"{call.name}/{stage.name}: {rel} does not exist")
            argv = _format_args(stage.argv)
            for arg in argv[1:]:
                if arg.endswith((".py", ".sh")) and not (ROOT / arg).is_file():
                    problems.append(f"{call.name}/{stage.name}: {arg} does not exist")
            for rel in stage.pytest_paths:
                if not (ROOT / rel).exists():
                    problems.append(f"{call.name}/{stage.name}: {rel} does not exist")
    stages_total = sum(c.stage_seconds for c in gpu_day)
    if stages_total > STAGE_BUDGET_S:
        problems.append(f"the GPU-day stages add up to {stages_total} s, over {STAGE_BUDGET_S} s (12 minutes)")
    device_total = MACHINE_START_S + sum(c.timeout_s + TRANSFER_S for c in gpu_day) + WARM_WINDOW_S
    if device_total > DEVICE_BUDGET_S:
        problems.append(
            f"the GPU day needs up to {device_total} s of device time (start {MACHINE_START_S} s, the calls, "
            f"transfers, the last warm window), over {DEVICE_BUDGET_S} s"
        )
    for later in gpu_day[1:]:
        # The later call must be ready before the earlier one starts: nothing is prepared in the warm window.
        if not all(p.startswith(CARRY_DIR) for p in later.carry):
            problems.append(f"{later.name}: carries paths outside {CARRY_DIR}/ that prepare.sh does not make")
        if not later.stages or later.stages[0].name != "install":
            problems.append(f"{later.name}: must start by installing (a fresh machine has nothing)")
    return problems


def check_artefacts(calls=tuple(CALLS.values()), root: Path = ROOT) -> tuple[list[str], dict]:
    """The problems of the carried files prepare.sh made, and each call's sizes (bytes)."""
    problems, sizes = [], {}
    tree = working_tree_bytes(root)
    for call in calls:
        missing = [g for g in call.needs_files if not list(root.glob(g))]
        if missing:
            problems.append(f"{call.name}: missing {', '.join(missing)} (run tools/gpu/prepare.sh)")
            continue
        files = _carried_files(call, root)
        carry = sum(f.stat().st_size for f in files)
        sizes[call.name] = {"working_tree": tree, "carry": carry, "total": tree + carry}
        if tree + carry > CARRY_LIMIT_BYTES:
            problems.append(
                f"{call.name}: the working tree ({tree / MIB:.1f} MiB) and the carry ({carry / MIB:.1f} MiB) "
                f"make {(tree + carry) / MIB:.1f} MiB, over 64 MiB"
            )
        for f in files:
            if f.name.endswith(".tar.gz"):
                problem = apex_sources_problem(f)
                if problem:
                    problems.append(f"{call.name}: {problem}")
            if f.suffix == ".whl":
                problem = wheel_tag_problem(f)
                if problem:
                    problems.append(f"{call.name}: {problem}")
        names = {}
        for f in files:
            if f.suffix == ".whl":
                dist = f.name.split("-")[0].lower().replace("_", "-")
                if dist in names:
                    problems.append(f"{call.name}: two wheels of {dist}: {names[dist]} and {f.name}")
                names[dist] = f.name
    return problems, sizes


def check_commands(calls=tuple(CALLS.values()), python: str = sys.executable) -> list[str]:
    """Runs what can run on a CPU of every stage's command line, in this environment.

    The pytest stages: ``pytest --collect-only`` with the stage's own options (xdist's ``-n`` set
    to 0). The benchmark scripts: every ``--option`` the stage passes is one the script's
    ``--help`` lists.
    """
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        for call in calls:
            for stage in call.stages:
                argv = [a.format(py=python, work=tmp, results=tmp) for a in stage.argv]
                if argv[1:3] == ["-m", "pytest"]:
                    args = argv[3:]
                    if "-n" in args:
                        args[args.index("-n") + 1] = "0"
                    cmd = [python, "-m", "pytest", *args, "--collect-only"]
                elif argv[0] == python and argv[1].startswith("benchmarks/"):
                    cmd = [python, argv[1], "--help"]
                else:
                    continue
                pytest_env = {k: v for k, v in stage.env.items() if k.startswith("PYTEST_")}
                env = {**os.environ, **pytest_env, "TRITON_INTERPRET": "1"}
                proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
                where = f"{call.name}/{stage.name}"
                if proc.returncode != 0:
                    tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                    problems.append(f"{where}: {' '.join(cmd[1:])} failed (exit {proc.returncode}):\n{tail}")
                elif cmd[-1] == "--help":
                    for arg in argv[2:]:
                        option = arg.split("=")[0]
                        if option.startswith("--") and option not in proc.stdout:
                            problems.append(f"{where}: {argv[1]} has no option {option} (see its --help)")
    return problems


def tool_calls() -> str:
    """The device tool calls to make, as text for docs and for the session."""
    lines = []
    for call in CALLS.values():
        lines.append(f"# {call.name}: {call.when}")
        lines.append(
            json.dumps({"command": call.command, "carry": list(call.carry), "timeout_s": call.timeout_s}, indent=None)
        )
        for s in call.stages:
            lines.append(f"#   {s.name:<26} {s.timeout_s:>4} s  {s.purpose}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="check the plan (and the artefacts, when present)")
    parser.add_argument(
        "--require-artefacts", action="store_true", help="fail if prepare.sh's files are missing (default: skip)"
    )
    parser.add_argument(
        "--commands",
        action="store_true",
        help="also run the stages' command lines as far as a CPU can (pytest --collect-only, the benchmarks' --help)",
    )
    parser.add_argument("--tool-calls", action="store_true", help="print the device tool calls to make")
    parser.add_argument(
        "--calls", nargs="+", choices=sorted(CALLS), default=sorted(CALLS), help="check these calls' artefacts only"
    )
    args = parser.parse_args(argv)
    if args.tool_calls:
        print(tool_calls())
        return 0
    problems = check_plan()
    art_problems, sizes = check_artefacts(calls=tuple(CALLS[name] for name in args.calls))
    artefacts_present = bool(sizes)
    if args.require_artefacts or artefacts_present:
        problems += art_problems
    if args.commands:
        problems += check_commands()
    problems = list(dict.fromkeys(problems))
    report = {
        "calls": {
            c.name: {"timeout_s": c.timeout_s, "stages": {s.name: s.timeout_s for s in c.stages}}
            for c in CALLS.values()
        },
        "gpu_day_stage_seconds": sum(c.stage_seconds for c in GPU_DAY),
        "sizes_mib": {k: {kk: round(vv / MIB, 2) for kk, vv in v.items()} for k, v in sizes.items()},
        "artefacts": "checked" if (args.require_artefacts or artefacts_present) else "absent (not checked)",
        "problems": problems,
    }
    print(json.dumps(report, indent=1))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
