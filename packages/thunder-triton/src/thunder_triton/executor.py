"""The ``triton`` operator executor and the kernels registered on it.

Importing this module imports Triton and defines the kernels (it does not compile them: Triton
compiles a kernel on its first launch). :mod:`thunder_triton.plugin` imports it only when
Thunder asks for the executor and the executor can run here.
"""

from __future__ import annotations

from thunder.extend import OperatorExecutor
from thunder_triton import __version__
from thunder_triton import cross_entropy as _cross_entropy
from thunder_triton.plugin import unavailable_reason as _unavailable_reason

__all__ = ["TritonExecutor", "triton_ex", "triton_cross_entropy", "triton_cross_entropy_backward"]


class TritonExecutor(OperatorExecutor):
    """An operator executor whose kernels are Triton programs (CUDA, or the CPU interpreter)."""

    def unavailable_reason(self) -> str | None:
        return _unavailable_reason()


# Priority 30: ahead of fusion executors (nvFuser, 20), which would otherwise claim the
# decomposition of the operations these kernels implement.
triton_ex = TritonExecutor("triton", version=__version__, priority=30)

triton_cross_entropy, triton_cross_entropy_backward = _cross_entropy.register(triton_ex)
