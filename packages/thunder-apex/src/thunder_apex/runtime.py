"""Finding NVIDIA apex and its CUDA extensions without importing them.

apex is built from source, and each of its CUDA extensions is optional (``--xentropy`` for the
fused cross-entropy; the fused norms come with ``--cuda_ext``). Whether an extension was built is
decided here by *locating* its compiled module, never by importing it: importing ``thunder_apex``
or asking :func:`unavailable_reason` must stay cheap and must not initialise CUDA. The kernel
wrappers import the extensions on their first call (:func:`xentropy_extension`,
:func:`layer_norm_extension`).

Where apex puts the extensions:

- xentropy: ``xentropy_cuda`` as a top-level module (most apex releases) or as
  ``apex/contrib/xentropy/xentropy_cuda``; its Python interface is
  ``apex.contrib.xentropy.SoftmaxCrossEntropyLoss``, whose module holds the extension as
  ``xentropy_cuda``.
- fused norms: the top-level module ``fused_layer_norm_cuda`` (what
  ``apex.normalization.fused_layer_norm`` loads).

A module already present in ``sys.modules`` (for example a stand-in installed by a test) counts
as installed.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

__all__ = [
    "APEX_NOT_INSTALLED",
    "XENTROPY_NOT_BUILT",
    "apex_installed",
    "unavailable_reason",
    "xentropy_available",
    "layer_norm_available",
    "xentropy_extension",
    "layer_norm_extension",
]

#: the reason reported when ``import apex`` would fail
APEX_NOT_INSTALLED = "apex not installed"
#: the reason reported when apex is installed but its xentropy extension was not built
XENTROPY_NOT_BUILT = "apex built without xentropy"

_XENTROPY_PACKAGE = "apex.contrib.xentropy"
_XENTROPY_EXTENSION = "xentropy_cuda"
_LAYER_NORM_EXTENSION = "fused_layer_norm_cuda"


def _apex_dirs() -> list[str] | None:
    """The directories of the ``apex`` package, or ``None`` when apex is not installed (nothing is imported)."""
    if "apex" in sys.modules:
        module = sys.modules["apex"]
        if module is None:  # sys.modules["apex"] = None blocks the import
            return None
        return list(getattr(module, "__path__", []) or [])
    try:
        spec = importlib.util.find_spec("apex")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    return list(spec.submodule_search_locations or [])


def apex_installed() -> bool:
    """Whether the ``apex`` package can be imported (checked without importing it)."""
    return _apex_dirs() is not None


def _top_level_module_exists(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.machinery.PathFinder.find_spec(name) is not None


def xentropy_available() -> bool:
    """Whether apex with its xentropy CUDA extension is installed (checked without importing the extension)."""
    package = sys.modules.get(_XENTROPY_PACKAGE)
    if package is not None:
        # apex.contrib.xentropy prints a warning instead of failing when the extension is missing;
        # it then lacks SoftmaxCrossEntropyLoss
        return hasattr(package, "SoftmaxCrossEntropyLoss")
    dirs = _apex_dirs()
    if dirs is None:
        return False
    if _top_level_module_exists(_XENTROPY_EXTENSION):
        return True
    nested = [os.path.join(d, "contrib", "xentropy") for d in dirs]
    return importlib.machinery.PathFinder.find_spec(_XENTROPY_EXTENSION, nested) is not None


def layer_norm_available() -> bool:
    """Whether apex's fused LayerNorm/RMSNorm CUDA extension (``fused_layer_norm_cuda``) is installed."""
    return apex_installed() and _top_level_module_exists(_LAYER_NORM_EXTENSION)


def unavailable_reason() -> str | None:
    """Why the apex executor cannot run here: ``"apex not installed"``, ``"apex built without xentropy"``, or ``None``."""
    if not apex_installed():
        return APEX_NOT_INSTALLED
    if not xentropy_available():
        return XENTROPY_NOT_BUILT
    return None


def xentropy_extension() -> ModuleType:
    """apex's xentropy CUDA extension (``forward``/``backward``), imported on first use.

    It is the ``xentropy_cuda`` that ``apex.contrib.xentropy.SoftmaxCrossEntropyLoss`` calls:
    ``forward(logits, labels, smoothing, half_to_float) -> (losses, max_log_sum_exp)`` and
    ``backward(grad_loss, logits, max_log_sum_exp, labels, smoothing) -> grad_logits``.
    """
    package = importlib.import_module(_XENTROPY_PACKAGE)
    loss_fn = getattr(package, "SoftmaxCrossEntropyLoss", None)
    if loss_fn is None:
        raise RuntimeError(f"{XENTROPY_NOT_BUILT}: rebuild apex with --xentropy (see the thunder-apex README)")
    extension = getattr(sys.modules.get(loss_fn.__module__), _XENTROPY_EXTENSION, None)
    if extension is None:
        extension = importlib.import_module(_XENTROPY_EXTENSION)
    return extension


def layer_norm_extension() -> ModuleType:
    """apex's ``fused_layer_norm_cuda`` extension, imported on first use."""
    return importlib.import_module(_LAYER_NORM_EXTENSION)
