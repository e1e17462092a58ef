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
    ``known_patterns`` maps every pattern's name to its matcher; ``patterns`` holds those matched
    now: :data:`DEFAULT_PATTERNS` at first, the kernels that beat eager PyTorch on a GPU
    (docs/triton.md has the figures). :meth:`enable_patterns` and :meth:`disable_patterns` change it.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.known_patterns: dict = {}
        self.patterns: dict = {}

    def _known(self, names: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [n for n in names if n not in self.known_patterns]
        if unknown:
            raise ValueError(f"unknown triton pattern {unknown[0]!r}; known: {', '.join(sorted(self.known_patterns))}")
        return names

    def enable_patterns(self, *names: str) -> None:
        """Starts matching the named op chains (e.g. ``"swiglu"``, ``"linear_cross_entropy"``) in later traces."""
        for name in self._known(names):
            self.patterns[name] = self.known_patterns[name]

    def disable_patterns(self, *names: str) -> None:
        """Stops matching the named op chains in later traces."""
        for name in self._known(names):
            self.patterns.pop(name, None)

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
triton_ex.known_patterns.update(
    rms_norm=_rms_norm.match_rms_norm,
    swiglu=_swiglu.match_swiglu,
    rope=_rope.match_rope,
    linear_cross_entropy=_linear_cross_entropy.match_linear_cross_entropy,
)
#: The op chains matched unless switched off: on an H200 (bf16, forward+backward) RMSNorm ran
#: 2.5-5.4x and RoPE 1.3-1.6x eager's speed. SwiGLU (0.79x at 4096x11008) and the fused
#: linear+cross-entropy (0.37-0.65x, for 0.38-0.50x eager's peak memory) are opt-in.
DEFAULT_PATTERNS = ("rms_norm", "rope")
triton_ex.enable_patterns(*DEFAULT_PATTERNS)
