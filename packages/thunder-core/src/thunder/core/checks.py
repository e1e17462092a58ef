"""Input validation shared by meta functions: ``check`` and dimension canonicalisation."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

__all__ = ["check", "canonicalize_dim", "canonicalize_dims", "check_valid_shape"]


def check(cond: bool, message: Callable[[], str] | str, exception_type: type[Exception] = RuntimeError) -> None:
    """Raises ``exception_type(message)`` unless ``cond``; ``message`` may be a thunk (built only on failure)."""
    if not cond:
        raise exception_type(message() if callable(message) else message)


def canonicalize_dim(rank: int, dim: int, wrap_scalar: bool = True) -> int:
    """``dim`` in ``[0, rank)``, raising PyTorch's ``IndexError`` message when out of range."""
    if rank == 0 and wrap_scalar:
        rank = 1
    if not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if dim < -rank or dim >= rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim + rank if dim < 0 else dim


def canonicalize_dims(rank: int, dims: int | Sequence[int] | None, wrap_scalar: bool = True) -> tuple[int, ...]:
    if dims is None:
        return tuple(range(rank))
    if isinstance(dims, int):
        dims = (dims,)
    out = tuple(canonicalize_dim(rank, d, wrap_scalar) for d in dims)
    check(len(set(out)) == len(out), lambda: f"dim {out} appears multiple times in the list of dims")
    return out


def check_valid_shape(shape: Sequence[int]) -> None:
    for s in shape:
        check(isinstance(s, (int, torch.SymInt)), lambda: f"shape {tuple(shape)} must contain only ints", TypeError)
        check(s >= 0, lambda: f"Trying to create tensor with negative dimension {s}: {list(shape)}")
