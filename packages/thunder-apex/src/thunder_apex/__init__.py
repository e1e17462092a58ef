"""NVIDIA apex kernels as a Thunder executor.

``from thunder_apex import apex_ex`` gives the ``apex`` operator executor, with apex's fused
softmax cross-entropy registered for ``torch.nn.functional.cross_entropy`` and apex's fused
LayerNorm and RMSNorm for ``layer_norm``/``rms_norm`` (forward and backward each)::

    cfn = thunder.jit(fn, executors=[apex_ex])

Importing this package never imports apex or its CUDA extensions; the kernel wrappers import them
on their first call. Without apex the executor's ``unavailable_reason()`` says why (``"apex not
installed"``, ``"apex built without xentropy"``), its checkers decline every call, and the plugin
contributes nothing to ``thunder.discover()``.
"""

from thunder_apex import cross_entropy as _cross_entropy  # noqa: F401  (registers the implementations)
from thunder_apex import norms as _norms  # noqa: F401
from thunder_apex.cross_entropy import apex_cross_entropy, apex_cross_entropy_backward
from thunder_apex.executor import ApexExecutor, apex_ex
from thunder_apex.runtime import unavailable_reason

__version__ = "0.1.0"

__all__ = [
    "ApexExecutor",
    "apex_ex",
    "apex_cross_entropy",
    "apex_cross_entropy_backward",
    "unavailable_reason",
]
