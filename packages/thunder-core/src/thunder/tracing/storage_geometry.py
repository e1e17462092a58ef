"""Which storage elements a strided layout reads, on meta tensors (shadows): the questions views and in-place
layout changes ask of sizes, strides and offsets."""

from __future__ import annotations

import torch

__all__ = ["dense_layout", "extent", "positions", "reads_past", "spans_its_storage", "storage_elements"]


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
    if dense_layout(own.shape, own.stride()):  # (compare the ranges)
        (start, end), (first, last) = extent(own), extent(m)
        return first < start or last > end
    return not positions(m) <= positions(own)


def dense_layout(shape, stride) -> bool:
    """Whether a layout's elements fill a range of memory without gaps or repeats (ATen's non-overlapping and
    dense; the size-1 dimensions' strides do not count)."""
    expected = 1
    for n, s in sorted(((n, s) for n, s in zip(shape, stride) if n != 1), key=lambda d: d[1]):
        if s != expected:
            return False
        expected *= n
    return True


def extent(m: torch.Tensor) -> tuple[int, int]:
    """The first and last storage positions ``m`` (not empty) reads."""
    low = sum((n - 1) * s for n, s in zip(m.shape, m.stride()) if s < 0)
    high = sum((n - 1) * s for n, s in zip(m.shape, m.stride()) if s > 0)
    return m.storage_offset() + low, m.storage_offset() + high
