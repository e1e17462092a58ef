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
1,000 (``benchmarks/vision.py`` models, one thread). A process that has once freed a large tensor (most real
workloads) does not pay this.

So before the first program runs, thunder allocates and frees one block of ``SETTLE_BYTES`` (never touched, so it
costs an ``mmap`` and a ``munmap``): glibc then keeps freed memory up to twice that size in its heap instead of
returning it, as it would after any large tensor. The process may hold up to ``2 * SETTLE_BYTES`` of freed memory
more than before. Set ``THUNDER_SETTLE_MALLOC=0`` to leave the allocator alone. Elsewhere than with glibc (another
C library, or an allocator such as jemalloc preloaded) the block is an ordinary allocation and changes nothing.
"""

from __future__ import annotations

import os

import torch

__all__ = ["SETTLE_BYTES", "settle_host_allocator"]

# below glibc's DEFAULT_MMAP_THRESHOLD_MAX (32 MiB on 64-bit systems), less the block's header and alignment: a
# freed block above that maximum leaves the thresholds as they are
SETTLE_BYTES = 30 * 1024 * 1024

_settled = False


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (AttributeError, ValueError, OSError):  # (not a GNU system)
        return False


def settle_host_allocator() -> bool:
    """Allocates and frees one ``SETTLE_BYTES`` block once per process (see the module docstring); True when this
    call did, False when it was done before, switched off (``THUNDER_SETTLE_MALLOC=0``) or the C library is not
    glibc."""
    global _settled
    if _settled:
        return False
    _settled = True
    if os.environ.get("THUNDER_SETTLE_MALLOC", "1") == "0":
        return False
    if not _glibc():
        return False
    block = torch.empty(SETTLE_BYTES, dtype=torch.uint8)
    del block
    return True
