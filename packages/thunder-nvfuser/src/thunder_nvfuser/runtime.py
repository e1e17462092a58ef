"""nvFuser's runtime: is it installed, is there a CUDA device, do the versions fit.

Nothing here imports nvFuser at module import. :func:`unavailable_reason` is what the plugin
reports when it contributes nothing; :func:`check_versions` runs the first time a fusion
executes and raises :class:`NvFuserVersionError` naming the wheel to install.

nvFuser is published as one wheel per CUDA and torch release, named
``nvfuser-cu<CUDA major><minor>-torch<torch major><minor>`` (``nvfuser-cu130-torch210`` is
nvFuser built against torch 2.10 for CUDA 13.0). A wheel built for another torch fails to import
(undefined symbols) or misbehaves, so the check compares the running torch with the one the
installed wheel's name encodes.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from types import ModuleType

import torch
from packaging.version import InvalidVersion, Version

__all__ = [
    "DEFAULT_WHEEL",
    "MIN_NVFUSER_VERSION",
    "MIN_TORCH_VERSION",
    "NvFuserVersionError",
    "suggested_wheel",
    "install_hint",
    "PUBLISHED_WHEELS",
    "installed_distribution",
    "cuda_unavailable_reason",
    "nvfuser_unavailable_reason",
    "unavailable_reason",
    "check_versions",
    "import_nvfuser",
]

DEFAULT_WHEEL = "nvfuser-cu130-torch210"
"""The wheel the ``thunder-nvfuser[nvfuser]`` extra installs (torch 2.10, CUDA 13.0)."""

MIN_NVFUSER_VERSION = Version("0.2.0")
"""The oldest nvFuser whose Python API (``define_tensor(stride_order=...)``, ``ops.cat``, ``ops.pad``) the lowering uses."""

MIN_TORCH_VERSION = Version("2.4")

_WHEEL_NAME = re.compile(r"^nvfuser-cu(?P<cuda>\d+)-torch(?P<torch>\d+)$")


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


def suggested_wheel(torch_version: str | None = None, cuda_version: str | None = None) -> str:
    """The nvFuser wheel built for ``torch_version`` and ``cuda_version`` (default: the running torch).

    ``suggested_wheel("2.10.0+cu130", "13.0") == "nvfuser-cu130-torch210"``. Without a CUDA
    version (a CPU-only torch) the CUDA 13.0 wheel is named; the name follows nvFuser's scheme
    and is not checked against what is published (the README lists the published ones).
    """
    tv = _release(torch_version if torch_version is not None else torch.__version__)
    cuda = cuda_version if torch_version is not None or cuda_version is not None else torch.version.cuda
    major, minor = (tv.release + (0, 0))[:2]
    return f"nvfuser-{_cuda_tag(cuda)}-torch{major}{minor}"


PUBLISHED_WHEELS = frozenset(
    f"nvfuser-{cu}-torch{t}"
    for cu, ts in {
        "cu130": ("29", "210"),
        "cu128": ("27", "28", "29", "210"),
        "cu126": ("26", "27", "28", "29", "210"),
        "cu129": ("28",),
    }.items()
    for t in ts
)
"""Per-torch nvFuser wheels published on PyPI when this package was released (see the README's table)."""


def install_hint(torch_version: str | None = None, cuda_version: str | None = None) -> str:
    """What to ``pip install`` for the running (or the given) torch and CUDA, in words."""
    wheel = suggested_wheel(torch_version, cuda_version)
    if wheel in PUBLISHED_WHEELS:
        return f"pip install {wheel}"
    tv = torch_version if torch_version is not None else torch.__version__
    return (
        f"no nvFuser wheel is known for torch {tv} (its name would be {wheel}); the newest per-torch "
        f"wheels are for torch 2.10 ({DEFAULT_WHEEL} and its siblings): use torch 2.10 with "
        f"pip install {DEFAULT_WHEEL}, try the unpinned nvfuser-cu130 nightly, or build nvFuser from source"
    )


def installed_distribution() -> str | None:
    """The name of the installed distribution that provides the ``nvfuser`` package, if any."""
    try:
        names = importlib.metadata.packages_distributions().get("nvfuser") or []
    except Exception:  # pragma: no cover - broken metadata of some other package
        names = []
    return names[0] if names else None


def cuda_unavailable_reason() -> str | None:
    """Why there is no CUDA device to run on, or ``None``."""
    if torch.version.cuda is None:
        return (
            f"no CUDA device: PyTorch {torch.__version__} is a CPU-only build "
            "(nvFuser needs a CUDA build of torch and an NVIDIA GPU)"
        )
    if not torch.cuda.is_available():
        return "no CUDA device: torch.cuda.is_available() is False"
    return None


def _nvfuser_installed() -> bool:
    return importlib.util.find_spec("nvfuser") is not None


def nvfuser_unavailable_reason() -> str | None:
    """Why nvFuser cannot be used (not installed), or ``None``; does not import it."""
    if not _nvfuser_installed():
        return f"nvFuser is not installed ({install_hint()}; see the thunder-nvfuser README)"
    return None


def import_nvfuser() -> ModuleType:
    """Imports nvFuser, turning an import failure into an error that names the wheel to install."""
    try:
        import nvfuser
    except Exception as e:
        dist = installed_distribution() or "nvfuser"
        raise NvFuserVersionError(
            f"nvFuser ({dist}) failed to import with torch {torch.__version__}: {type(e).__name__}: {e}. "
            f"Install the wheel built for this torch: {install_hint()}"
        ) from e
    return nvfuser


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
    if nvfuser_version is None:
        nv = import_nvfuser()
        nvfuser_version = str(getattr(nv, "__version__", None) or nv.version())
    if distribution is None:
        distribution = installed_distribution()
    cuda = None if torch_version is not None else torch.version.cuda
    hint = install_hint(tv_text, cuda)
    nvv = _release(nvfuser_version)
    if nvv < MIN_NVFUSER_VERSION:
        raise NvFuserVersionError(
            f"thunder-nvfuser needs nvFuser >= {MIN_NVFUSER_VERSION}, found {nvfuser_version} "
            f"({distribution or 'nvfuser'}): {hint}"
        )
    match = _WHEEL_NAME.match(distribution or "")
    if match is not None:
        built_for = match.group("torch")
        running = f"{tv.release[0]}{tv.release[1] if len(tv.release) > 1 else 0}"
        if built_for != running:
            raise NvFuserVersionError(
                f"the installed nvFuser wheel {distribution} was built for torch "
                f"{built_for[0]}.{built_for[1:]}, but torch {tv_text} is running: "
                f"pip uninstall {distribution}, then {hint}"
            )


def unavailable_reason() -> str | None:
    """Why the nvFuser executor cannot run here (nvFuser missing, no CUDA device, or both), or ``None``.

    Cheap checks first: nvFuser is imported (and its version checked) only when it is installed
    and a CUDA device is present.
    """
    reasons = [r for r in (nvfuser_unavailable_reason(), cuda_unavailable_reason()) if r]
    if reasons:
        return "; ".join(reasons)
    try:
        check_versions()
    except NvFuserVersionError as e:
        return str(e)
    return None
