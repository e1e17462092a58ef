"""Which storage elements a strided layout reads, on meta tensors (shadows): the questions views and in-place
layout changes ask of sizes, strides and offsets."""

from __future__ import annotations

import torch

__all__ = ["positions", "reads_past", "spans_its_storage", "storage_elements"]


def storage_elements(m: torch.Tensor) -> int:
    """How many elements of ``m``'s dtype its storage holds."""
    return m.untyped_storage().nbytes() // max(m.element_size(), 1)


def spans_its_storage(m: torch.Tensor) -> bool:
    """Whether ``m`` is its whole storage: contiguous, from its first element to its last."""
    return m.storage_offset() == 0 and m.numel() == storage_elements(m) and m.is_contiguous()


def positions(m: torch.Tensor) -> set[int]:
    """The storage positions of ``m``'s elements."""
    n = storage_elements(m)
    return set(torch.as_strided(torch.arange(n), m.shape, m.stride(), m.storage_offset()).reshape(-1).tolist())


def reads_past(m: torch.Tensor, own: torch.Tensor) -> bool:
    """Whether ``m`` reads storage elements that ``own`` (a view of the same storage) does not hold."""
    if m.numel() == 0:
        return False
    if _fills_a_range(own):  # (compare the ranges)
        (start, end), (first, last) = _extent(own), _extent(m)
        return first < start or last > end
    return not positions(m) <= positions(own)


def _fills_a_range(m: torch.Tensor) -> bool:
    """Whether ``m``'s elements fill a range of its storage without gaps or repeats."""
    expected = 1
    for n, s in sorted(((n, abs(s)) for n, s in zip(m.shape, m.stride()) if n != 1), key=lambda d: d[1]):
        if s != expected:
            return False
        expected *= n
    return True


def _extent(m: torch.Tensor) -> tuple[int, int]:
    """The first and last storage positions ``m`` (not empty) reads."""
    low = sum((n - 1) * s for n, s in zip(m.shape, m.stride()) if s < 0)
    high = sum((n - 1) * s for n, s in zip(m.shape, m.stride()) if s > 0)
    return m.storage_offset() + low, m.storage_offset() + high
