"""Triton kernels for Thunder, provided as an executor plugin (``thunder.discover()`` finds it).

Importing this package imports neither Triton nor any kernel: the executor is built by
:func:`thunder_triton.plugin.thunder_executors` when Thunder asks for it, or by
:func:`get_executor`.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "get_executor", "unavailable_reason"]


def unavailable_reason() -> str | None:
    """Why the Triton executor cannot run here (no ``triton``, no CUDA and no interpreter), or ``None``."""
    from thunder_triton.plugin import unavailable_reason as _reason

    return _reason()


def get_executor():
    """The ``triton`` executor (imports Triton and defines the kernels on first use).

    Raises:
        RuntimeError: if the executor cannot run here; the message says why.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"the thunder-triton executor is unavailable: {reason}")
    from thunder_triton.executor import triton_ex

    return triton_ex
