"""The ``triton`` operator executor and the kernels registered on it.

Importing this module imports Triton and defines the kernels (it does not compile them: Triton
compiles a kernel on its first launch). :mod:`thunder_triton.plugin` imports it only when
Thunder asks for the executor and the executor can run here.
"""

from __future__ import annotations

from thunder.extend import OperatorExecutor
from thunder_triton import __version__
from thunder_triton import cross_entropy as _cross_entropy
from thunder_triton import linear_cross_entropy as _linear_cross_entropy
from thunder_triton import rms_norm as _rms_norm
from thunder_triton import rope as _rope
from thunder_triton import swiglu as _swiglu
from thunder_triton.patterns import rewrite as _rewrite
from thunder_triton.plugin import unavailable_reason as _unavailable_reason

__all__ = [
    "TritonExecutor",
    "triton_ex",
    "triton_cross_entropy",
    "triton_cross_entropy_backward",
    "triton_rms_norm",
    "triton_rms_norm_backward",
    "triton_swiglu",
    "triton_swiglu_backward",
    "triton_linear_cross_entropy",
    "triton_linear_cross_entropy_backward",
    "triton_rope",
    "triton_rope_backward",
]


class TritonExecutor(OperatorExecutor):
    """An operator executor whose kernels are Triton programs (CUDA, or the CPU interpreter).

    Besides the torch-language symbols it implements directly (``cross_entropy``, ``rms_norm``),
    it recognises op chains in the traced program (RMSNorm modules, ``silu(a) * b``, rotary
    embeddings, an lm_head ``linear`` feeding only a ``cross_entropy``) and fuses each into one
    composite symbol that its kernels implement (:mod:`thunder_triton.patterns`).
    ``patterns`` maps each pattern's name to its matcher; remove a name to stop matching it.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.patterns: dict = {}

    def unavailable_reason(self) -> str | None:
        return _unavailable_reason()

    def rewrite_trace(self, trace):
        if not self.patterns:
            return trace
        return _rewrite(trace, list(self.patterns.values()))


# Priority 30: ahead of fusion executors (nvFuser, 20), which would otherwise claim the
# decomposition of the operations these kernels implement.
triton_ex = TritonExecutor("triton", version=__version__, priority=30)

triton_cross_entropy, triton_cross_entropy_backward = _cross_entropy.register(triton_ex)
triton_rms_norm, triton_rms_norm_backward = _rms_norm.register(triton_ex)
triton_swiglu, triton_swiglu_backward = _swiglu.register(triton_ex)
triton_linear_cross_entropy, triton_linear_cross_entropy_backward = _linear_cross_entropy.register(triton_ex)
triton_rope, triton_rope_backward = _rope.register(triton_ex)
triton_ex.patterns["rms_norm"] = _rms_norm.match_rms_norm
triton_ex.patterns["swiglu"] = _swiglu.match_swiglu
triton_ex.patterns["rope"] = _rope.match_rope
triton_ex.patterns["linear_cross_entropy"] = _linear_cross_entropy.match_linear_cross_entropy
