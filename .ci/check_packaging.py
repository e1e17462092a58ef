"""Builds, checks and installs every package the way a user gets them (``python -m tox -e packaging``).

1. ``python -m build`` makes an sdist and a wheel of each package under ``packages/`` (the wheel is
   built from the sdist, so a file missing from the sdist fails here).
2. ``twine check --strict`` checks their metadata (the README renders on PyPI), and every wheel
   declares the Apache-2.0 license and ships the repository's LICENSE text.
3. A fresh virtual environment gets the wheels with
   ``pip install --find-links dist/ thunder-core thunder-nvfuser ...`` (torch held to
   ``constraints.txt``), and from outside the source tree we run the demo, ``python -m
   thunder.plugins`` and ``torch.compile(backend="thunder")`` with what was installed.

Usage: ``python .ci/check_packaging.py [--keep DIR]`` (the tox env passes nothing: a temporary
directory is used and removed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ["thunder-core", "thunder-nvfuser", "thunder-triton", "thunder-apex", "thunder-distributed"]

_SMOKE = r"""
import importlib.metadata, sys
import torch
import thunder, thunder.dynamo

assert sys.prefix in thunder.__file__, f"thunder imported from {thunder.__file__}, not the fresh environment"
for name in PACKAGES:
    assert importlib.metadata.version(name) == "0.1.0", name
f = lambda x: torch.nn.functional.gelu(x) * 2
x = torch.randn(8, 8)
torch.testing.assert_close(torch.compile(f, backend="thunder")(x), f(x))
torch.testing.assert_close(thunder.jit(f, executors=thunder.discover())(x), f(x))
print("installed wheels work:", thunder.__file__)
"""


def run(cmd: list, **kwargs) -> subprocess.CompletedProcess:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=True, **kwargs)
    print(f"  ({time.perf_counter() - start:.1f} s)", flush=True)
    return proc


def check_license(wheel: Path) -> None:
    """The wheel declares the project's license (SPDX expression) and ships the root LICENSE text."""
    license_text = (REPO / "LICENSE").read_text()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        shipped = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert "License-Expression: Apache-2.0" in metadata.splitlines(), f"{wheel.name}: no Apache-2.0 license"
        assert shipped and archive.read(shipped[0]).decode() == license_text, (
            f"{wheel.name}: its LICENSE file is missing or differs from the repository's LICENSE"
        )


def main(work: Path) -> None:
    dist = work / "dist"
    # build from a copy: building in place leaves build/ and *.egg-info in the checkout
    ignore = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache")
    for name in PACKAGES:
        src = work / "src" / name
        shutil.copytree(REPO / "packages" / name, src, ignore=ignore)
        run([sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, src])
    built = sorted(dist.iterdir())
    for name in PACKAGES:
        stem = name.replace("-", "_")
        kinds = {p.suffix for p in built if p.name.startswith(stem + "-")}
        assert kinds == {".whl", ".gz"}, f"{name}: expected a wheel and an sdist in {dist}, found {kinds}"
    run([sys.executable, "-m", "twine", "check", "--strict", *built])
    for wheel in (p for p in built if p.suffix == ".whl"):
        check_license(wheel)

    venv = work / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_CONSTRAINT"] = str(REPO / "constraints.txt")  # torch==2.13.0, as everywhere else
    pip = [python, "-m", "pip", "install", "-q", "--find-links", dist]
    run([*pip, *PACKAGES], env=env)

    outside = work / "elsewhere"  # not the checkout: only the installed packages are importable
    outside.mkdir()
    run([python, "-c", _SMOKE.replace("PACKAGES", repr(PACKAGES))], env=env, cwd=outside)
    report = run([python, "-m", "thunder.plugins"], env=env, cwd=outside, capture_output=True, text=True)
    print(report.stdout)
    for plugin in ("apex", "distributed", "nvfuser", "triton"):
        assert f"- {plugin} (thunder-{plugin} 0.1.0)" in report.stdout, f"{plugin} missing from the report"
    run([python, REPO / "examples" / "demo.py"], env=env, cwd=outside, stdout=subprocess.DEVNULL)
    print("packaging check passed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", type=Path, help="work in this directory and keep it (dist/, venv/)")
    args = parser.parse_args()
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        main(args.keep.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="thunder-packaging-") as tmp:
            main(Path(tmp))
