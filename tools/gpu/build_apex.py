"""Builds only apex's xentropy and fused layer-norm CUDA extensions on the device (stage ``apex_build``).

    python3 tools/gpu/build_apex.py WORK APEX_SRC_TARBALL

The tarball is the trimmed apex source tree that tools/gpu/prepare.sh makes (apex's Python
package with ``apex.normalization`` and ``apex.contrib.xentropy``, and the C++/CUDA sources of the
two extensions). apex's own setup.py builds a dozen extensions with ``--cuda_ext``; this builds
the two thunder-apex uses, each with ``torch.utils.cpp_extension.load`` (ninja, ``MAX_JOBS``
jobs) for the device's GPU only (``TORCH_CUDA_ARCH_LIST``, 9.0 on an H100/H200), in parallel,
into ``WORK/apex-build``, next to the Python package. The runner puts ``WORK/apex-build`` on
``PYTHONPATH`` for the stages after this one, so ``import apex.contrib.xentropy`` and
``import fused_layer_norm_cuda`` work as after ``pip install apex``.

The compile flags are apex setup.py's for these two extensions. Prints one JSON object: each
extension's build seconds and whether it imports, or the compiler's error.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import tarfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime
from pathlib import Path

# (module name, sources, nvcc flags, extra C++ flags), as apex's setup.py builds them
EXTENSIONS = (
    (
        "fused_layer_norm_cuda",
        ("csrc/layer_norm_cuda.cpp", "csrc/layer_norm_cuda_kernel.cu"),
        ["-maxrregcount=50", "-O3", "--use_fast_math"],
        ["-O3"],
    ),
    (
        "xentropy_cuda",
        ("apex/contrib/csrc/xentropy/interface.cpp", "apex/contrib/csrc/xentropy/xentropy_kernel.cu"),
        ["-O3"],
        ["-O3", f'-DXENTROPY_VER=\\"{datetime.today().strftime("%y.%m.%d")}\\"'],
    ),
)

# What the trimmed tarball must hold (prepare.sh checks it too): sources and the Python modules.
REQUIRED_FILES = tuple(src for _, sources, _, _ in EXTENSIONS for src in sources) + (
    "csrc/type_shim.h",
    "csrc/static_switch.h",
    "apex/__init__.py",
    "apex/_autocast_utils.py",
    "apex/normalization/fused_layer_norm.py",
    "apex/contrib/xentropy/softmax_xentropy.py",
)


def _build(name: str, sources: tuple, nvcc: list, cxx: list, src: str, build: str) -> dict:
    os.dup2(2, 1)  # the compiler's output to stderr (the log): stdout carries the JSON report alone
    from torch.utils.cpp_extension import load

    t0 = time.monotonic()
    ext_build = Path(build) / f"{name}-build"
    ext_build.mkdir(parents=True, exist_ok=True)
    try:
        load(
            name=name,
            sources=[os.path.join(src, s) for s in sources],
            extra_include_paths=[os.path.join(src, "csrc")],
            extra_cflags=cxx,
            extra_cuda_cflags=nvcc,
            build_directory=str(ext_build),
            verbose=True,
        )
    except Exception as e:  # the compiler's message is the result
        return {"ok": False, "seconds": round(time.monotonic() - t0, 1), "error": f"{type(e).__name__}: {e}"[-4000:]}
    so = next(ext_build.glob(f"{name}*.so"))
    os.replace(so, Path(build) / so.name)  # top-level modules, as apex installs them
    return {"ok": True, "seconds": round(time.monotonic() - t0, 1)}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.exit("usage: build_apex.py WORK APEX_SRC_TARBALL")
    work, tarball = Path(argv[0]), Path(argv[1])
    src, build = work / "apex-src", work / "apex-build"
    src.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(src, filter="data")
    missing = [f for f in REQUIRED_FILES if not (src / f).is_file()]
    if missing:
        sys.exit(f"build_apex.py: {tarball} lacks {', '.join(missing)} (remake it with tools/gpu/prepare.sh)")
    build.mkdir(parents=True, exist_ok=True)
    if not (build / "apex").exists():
        (build / "apex").symlink_to(src / "apex", target_is_directory=True)

    import torch

    major, minor = torch.cuda.get_device_capability()
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", f"{major}.{minor}")
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    report: dict = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "arch": os.environ["TORCH_CUDA_ARCH_LIST"],
        "max_jobs": os.environ["MAX_JOBS"],
    }
    t0 = time.monotonic()
    with ProcessPoolExecutor(len(EXTENSIONS), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {name: pool.submit(_build, name, *rest, str(src), str(build)) for name, *rest in EXTENSIONS}
        report["extensions"] = {name: f.result() for name, f in futures.items()}
    report["build_seconds"] = round(time.monotonic() - t0, 1)
    sys.path[:0] = [str(build)]
    try:
        import apex.contrib.xentropy  # noqa: F401
        import fused_layer_norm_cuda  # noqa: F401

        report["imports"] = "ok"
    except Exception as e:
        report["imports"] = f"{type(e).__name__}: {e}"
    print(json.dumps(report, indent=1))
    return 0 if report["imports"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
