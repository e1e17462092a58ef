"""Host memory for programs on CPU tensors: glibc's allocator, settled once per process.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc's ``malloc`` serves a request of at least its
*mmap threshold* (128 KiB at first) from a fresh ``mmap``, and gives the top of its heap back to the system
(``brk``) whenever more than its *trim threshold* (twice the mmap threshold) lies free there. Both thresholds
adapt: the first time a block above the mmap threshold (and at most 32 MiB) is freed, glibc raises the mmap
threshold to that block's size and the trim threshold to twice it.

A training step of a small network (a CNN at batch 2: no tensor above a few MiB) never frees such a block, so the
thresholds stay low, and the heap top is trimmed and grown again many times a step. Each page grown again is a page
fault: a compiled DenseNet-121 step (thunder, with or without fusion, and ``torch.compile`` too) took about 5,000 to
6,000 of them, 10 to 17 ms of system time in a step of 90, where eager PyTorch, freeing in another order, took 0 to
1,000 (``benchmarks/vision.py`` models, one thread). Raising the thresholds as a freed 30 MiB block would (the most
glibc's own adaptation reaches) is not always enough: a step that frees more than twice that at the heap's top
still has it trimmed each time. MaxViT's fused step, in a process where ``torch.compile`` had compiled the same
model before, took 6,000 to 17,000 page faults a step with the trim threshold at 60 MiB, none at 96 MiB.

So before the first program runs, thunder sets glibc's mmap threshold to ``MMAP_THRESHOLD_BYTES`` (tensors below
it come from the heap, as after any large tensor freed) and its trim threshold to ``TRIM_THRESHOLD_BYTES`` (the heap
top is given back only when more than that lies free), with ``mallopt``; glibc's own adaptation of the two stops
there. The process may hold up to ``TRIM_THRESHOLD_BYTES`` of freed memory more than before. Set
``THUNDER_SETTLE_MALLOC=0`` to leave the allocator alone. Another C library is left alone too; with an allocator
such as jemalloc preloaded in place of glibc's ``malloc``, the settings reach an allocator that serves nothing.
"""

from __future__ import annotations

import ctypes
import os

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "settle_host_allocator"]

# (glibc accepts at most 32 MiB, its DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems: larger tensors keep their own mmap,
# given back at once when freed)
MMAP_THRESHOLD_BYTES = 30 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024

# mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_settled = False


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # (not a GNU system)
        return False


def settle_host_allocator() -> bool:
    """Sets glibc's mmap and trim thresholds once per process (see the module docstring); True when this call did,
    False when it was done before, switched off (``THUNDER_SETTLE_MALLOC=0``), the C library is not glibc or it
    refused a value."""
    global _settled
    if _settled:
        return False
    _settled = True
    if os.environ.get("THUNDER_SETTLE_MALLOC", "1") == "0":
        return False
    if not _glibc():
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # (no symbol table to look it up in, or a C library without it)
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # (mallopt returns 1 on success)
    return (
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    )
