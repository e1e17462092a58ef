"""nvFuser's runtime: is it installed, is there a CUDA device, do the versions fit.

Nothing here imports nvFuser at module import. :func:`unavailable_reason` is the one line the
plugin reports when it contributes nothing (the decisive reason first, then the fix);
:func:`check_versions` runs the first time a fusion executes and raises
:class:`NvFuserVersionError` naming the wheel to install.

nvFuser is published as one wheel per CUDA and torch release, named
``nvfuser-cu<CUDA major><minor>-torch<torch major><minor>`` (``nvfuser-cu130-torch210`` is
nvFuser built against torch 2.10 for CUDA 13.0), as pre-releases only (``pip install --pre``).
The current wheels ship the Python module ``nvfuser_direct`` (nvFuser's direct bindings); older
ones shipped ``nvfuser`` (the legacy frontend). The lowering uses only calls both have
(``FusionDefinition``, ``define_tensor``, ``define_scalar``, ``ops.*``, ``add_output``,
``execute``), so ``nvfuser_direct`` is used when present and ``nvfuser`` otherwise. A wheel built
for another torch fails to import (undefined symbols) or misbehaves, so the checks compare the
running torch with the one the installed wheel's name encodes.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import re
from types import ModuleType

import torch
from packaging.version import InvalidVersion, Version

__all__ = [
    "ALLOW_MISMATCH_ENV",
    "DEFAULT_WHEEL",
    "MODULE_NAMES",
    "MIN_NVFUSER_VERSION",
    "MIN_TORCH_VERSION",
    "NvFuserVersionError",
    "PUBLISHED_WHEELS",
    "WHEEL_PYTHONS",
    "suggested_wheel",
    "install_hint",
    "installed_module",
    "installed_distribution",
    "cuda_unavailable_reason",
    "nvfuser_unavailable_reason",
    "unavailable_reason",
    "check_versions",
    "import_nvfuser",
]

DEFAULT_WHEEL = "nvfuser-cu130-torch210"
"""The wheel the ``thunder-nvfuser[nvfuser]`` extra installs (torch 2.10, CUDA 13.0, Python 3.10 or 3.12)."""

MODULE_NAMES = ("nvfuser_direct", "nvfuser")
"""nvFuser's Python modules, preferred first: the direct bindings, then the legacy frontend."""

MIN_NVFUSER_VERSION = Version("0.2.0")
"""The oldest nvFuser whose Python API (``define_tensor(stride_order=...)``, ``ops.cat``, ``ops.pad``) the lowering uses."""

MIN_TORCH_VERSION = Version("2.4")

WHEEL_PYTHONS = ("3.10", "3.12")
"""The Python versions the per-torch wheels are built for (CPython, Linux x86_64 only)."""

ALLOW_MISMATCH_ENV = "THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH"
"""Set to ``1`` to try a wheel built for another torch anyway (only whether it imports decides)."""

_WHEEL_NAME = re.compile(r"^nvfuser-cu(?P<cuda>\d+)-torch(?P<torch>\d+)$")

_INDEX = "https://download.pytorch.org/whl"


class NvFuserVersionError(RuntimeError):
    """nvFuser or torch is too old, or the nvFuser wheel was built for another torch."""


def _release(version: str) -> Version:
    """``2.10.0+cu130`` -> ``Version("2.10.0")`` (the local part and pre-release tags dropped)."""
    try:
        return Version(Version(str(version)).base_version)
    except InvalidVersion:
        match = re.match(r"\d+(\.\d+)*", str(version))
        if match is None:
            raise
        return Version(match.group(0))


def _cuda_tag(cuda_version: str | None) -> str:
    if not cuda_version:
        return "cu130"
    parts = str(cuda_version).split(".")
    return f"cu{parts[0]}{parts[1] if len(parts) > 1 else '0'}"


def _torch_tag(torch_version: str) -> str:
    major, minor = (_release(torch_version).release + (0, 0))[:2]
    return f"{major}{minor}"


def _normalized(distribution: str) -> str:
    """``nvfuser_cu130_torch210`` (as the wheel's metadata spells it) -> ``nvfuser-cu130-torch210``."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def suggested_wheel(torch_version: str | None = None, cuda_version: str | None = None) -> str:
    """The nvFuser wheel built for ``torch_version`` and ``cuda_version`` (default: the running torch).

    ``suggested_wheel("2.10.0+cu130", "13.0") == "nvfuser-cu130-torch210"``. Without a CUDA
    version (a CPU-only torch) the CUDA 13.0 wheel is named; the name follows nvFuser's scheme
    and is not checked against what is published (:data:`PUBLISHED_WHEELS` lists those).
    """
    tv = torch_version if torch_version is not None else torch.__version__
    cuda = cuda_version if torch_version is not None or cuda_version is not None else torch.version.cuda
    return f"nvfuser-{_cuda_tag(cuda)}-torch{_torch_tag(tv)}"


PUBLISHED_WHEELS = frozenset(
    f"nvfuser-{cu}-torch{t}"
    for cu, ts in {
        "cu130": ("29", "210"),
        "cu128": ("29", "210"),
        "cu126": ("29", "210"),
    }.items()
    for t in ts
)
"""Per-torch nvFuser wheels on PyPI that ship ``nvfuser_direct`` (pre-releases, 0.2.34 to 0.2.36; see the README)."""


def install_hint(torch_version: str | None = None, cuda_version: str | None = None) -> str:
    """The ``pip install`` line for the running (or the given) torch and CUDA, in words."""
    wheel = suggested_wheel(torch_version, cuda_version)
    if wheel in PUBLISHED_WHEELS:
        return f"pip install --pre {wheel}"
    tv = torch_version if torch_version is not None else torch.__version__
    return (
        f"no nvFuser wheel for torch {_release(tv)}: pip install 'torch==2.10.*' --index-url {_INDEX}/cu130, "
        f"then pip install --pre {DEFAULT_WHEEL}"
    )


def installed_module() -> str | None:
    """The name of the installed nvFuser module (``nvfuser_direct`` preferred), or ``None``; does not import it."""
    for name in MODULE_NAMES:
        try:
            if importlib.util.find_spec(name) is not None:
                return name
        except (ImportError, ValueError):  # pragma: no cover - a broken namespace package
            continue
    return None


def installed_distribution(module: str | None = None) -> str | None:
    """The normalised name of the distribution that provides nvFuser's module (``nvfuser-cu130-torch210``), if any."""
    module = module or installed_module()
    if module is None:
        return None
    try:
        names = importlib.metadata.packages_distributions().get(module) or []
    except Exception:  # pragma: no cover - broken metadata of some other package
        names = []
    return _normalized(names[0]) if names else None


def cuda_unavailable_reason() -> str | None:
    """Why there is no CUDA device to run on, with the fix, or ``None``."""
    if torch.version.cuda is None:
        return (
            f"CPU-only torch {torch.__version__}: install torch 2.10 for CUDA "
            f"(pip install 'torch==2.10.*' --index-url {_INDEX}/cu130), then pip install --pre {DEFAULT_WHEEL}"
        )
    if not torch.cuda.is_available():
        return (
            f"no CUDA device (torch.cuda.is_available() is False with torch {torch.__version__}): "
            "run on a machine with an NVIDIA GPU and driver"
        )
    return None


def _mismatch(distribution: str | None, torch_version: str, cuda_version: str | None) -> str | None:
    """Why the installed wheel does not fit ``torch_version`` (its name encodes another torch) and the fix, or ``None``."""
    match = _WHEEL_NAME.match(distribution or "")
    if match is None or os.environ.get(ALLOW_MISMATCH_ENV) == "1":
        return None
    built_for, running = match.group("torch"), _torch_tag(torch_version)
    if built_for == running:
        return None
    problem = f"nvFuser wheel {distribution} is built for torch {built_for[0]}.{built_for[1:]}, not {torch_version}"
    wheel = suggested_wheel(torch_version, cuda_version)
    if wheel in PUBLISHED_WHEELS:
        return f"{problem}: pip uninstall -y {distribution} && pip install --pre {wheel}"
    cuda = f"cu{match.group('cuda')}"
    return f"{problem}: pip install 'torch=={built_for[0]}.{built_for[1:]}.*' --index-url {_INDEX}/{cuda}"


def nvfuser_unavailable_reason() -> str | None:
    """Why nvFuser cannot be used (not installed, or a wheel for another torch), with the fix, or ``None``.

    Does not import nvFuser.
    """
    if installed_module() is None:
        return f"nvFuser not installed: {install_hint()}"
    return _mismatch(installed_distribution(), torch.__version__, torch.version.cuda)


def import_nvfuser() -> ModuleType:
    """Imports nvFuser's module, turning an import failure into an error that names the wheel to install."""
    name = installed_module() or MODULE_NAMES[0]
    try:
        return importlib.import_module(name)
    except Exception as e:
        dist = installed_distribution(name) or name
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise NvFuserVersionError(
            f"{name} ({dist}) fails to import with torch {torch.__version__} ({type(e).__name__}: {first_line}): "
            f"{install_hint()}"
        ) from e


def _module_version(nv: ModuleType) -> str:
    version = getattr(nv, "__version__", None)
    if version is None and callable(getattr(nv, "version", None)):
        version = nv.version()
    return str(version)


def check_versions(
    nvfuser_version: str | None = None,
    *,
    torch_version: str | None = None,
    distribution: str | None = None,
) -> None:
    """Raises :class:`NvFuserVersionError` unless nvFuser and torch fit together and are new enough.

    With no arguments it checks the running torch and the installed nvFuser (importing it).
    """
    tv_text = torch_version if torch_version is not None else torch.__version__
    tv = _release(tv_text)
    if tv < MIN_TORCH_VERSION:
        raise NvFuserVersionError(f"thunder-nvfuser needs torch >= {MIN_TORCH_VERSION}, found {tv_text}")
    if distribution is None and nvfuser_version is None:
        distribution = installed_distribution()
    cuda = None if torch_version is not None else torch.version.cuda
    hint = install_hint(tv_text, cuda)
    mismatch = _mismatch(_normalized(distribution) if distribution else None, tv_text, cuda)
    if mismatch is not None:  # before importing: a wheel for another torch may not even load
        raise NvFuserVersionError(mismatch)
    if nvfuser_version is None:
        nvfuser_version = _module_version(import_nvfuser())
    if _release(nvfuser_version) < MIN_NVFUSER_VERSION:
        raise NvFuserVersionError(
            f"thunder-nvfuser needs nvFuser >= {MIN_NVFUSER_VERSION}, found {nvfuser_version} "
            f"({distribution or 'nvfuser'}): {hint}"
        )


def unavailable_reason() -> str | None:
    """Why the nvFuser executor cannot run here, in one line (decisive reason first, then the fix), or ``None``.

    In order: a CPU-only torch, no CUDA device, nvFuser not installed, a wheel built for another
    torch, nvFuser failing to import or too old. Cheap checks first: nvFuser is imported only
    when it is installed, fits the running torch and a CUDA device is present.
    """
    reason = cuda_unavailable_reason() or nvfuser_unavailable_reason()
    if reason is not None:
        return reason
    try:
        check_versions()
    except NvFuserVersionError as e:
        return str(e)
    return None
