"""glibc's allocator settled once per process before the first program runs (thunder.executors.host_memory)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from thunder.executors import host_memory

pytestmark = pytest.mark.skipif(
    not host_memory._glibc(), reason="glibc's malloc thresholds only: this C library is not glibc"
)

# In a fresh process: is a 4 MiB tensor served from a fresh mmap (True: freeing it returns it to the system) or from
# the heap (False)? glibc's mallinfo2 counts the bytes in mmapped blocks (hblkhd). (`import torch` itself leaves the
# mmap threshold between 1 and 2 MiB.)
_PROBE = """
import ctypes, os, sys, torch
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
def mmapped():
    return libc.mallinfo2().hblkhd
if sys.argv[1] == "jit":
    import thunder
    thunder.jit(lambda x: x * 2)(torch.ones(2))
if sys.argv[2] == "mmapped":
    before = mmapped()
    t = torch.empty(4 << 20, dtype=torch.uint8)
    print(mmapped() > before)
else:  # 120 MiB of 6 MiB heap blocks, touched and freed: is the heap's top then given back (trimmed)?
    # (the 1 MiB block below them, freed last, has glibc consolidate the small freed chunks, so that the top is free)
    trigger = torch.ones(1 << 20, dtype=torch.uint8)
    blocks = [torch.ones(6 << 20, dtype=torch.uint8) for _ in range(20)]
    grown = libc.mallinfo2().arena
    del blocks, trigger
    print(libc.mallinfo2().arena < grown - (60 << 20))
"""


def _probe(mode: str, question: str, **env) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode, question],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return out.stdout.strip().splitlines()[-1] == "True"


def _four_mib_tensor_is_mmapped(mode: str, **env) -> bool:
    return _probe(mode, "mmapped", **env)


def _freed_heap_top_is_trimmed(mode: str, **env) -> bool:
    # (without glibc's per-thread cache of small freed chunks, which are never merged: one of them left above the
    # blocks, a tensor's header, would keep the top in use and make the answer depend on where it landed)
    return _probe(mode, "trimmed", GLIBC_TUNABLES="glibc.malloc.tcache_count=0", **env)


def test_the_first_program_settles_glibcs_thresholds_so_freed_tensors_stay_in_the_heap():
    # before any program: glibc serves a 4 MiB tensor from a fresh mmap, and freeing it returns the memory
    assert _four_mib_tensor_is_mmapped("plain")
    # after thunder's first program: from the heap (the thresholds are above it), so a step's freed tensors are
    # reused without page faults
    assert not _four_mib_tensor_is_mmapped("jit")
    # switched off: as before
    assert _four_mib_tensor_is_mmapped("jit", THUNDER_SETTLE_MALLOC="0")


def test_the_first_program_keeps_a_steps_freed_heap_top_instead_of_trimming_it():
    # 120 MiB freed at the heap's top (the blocks served from the heap: the mmap threshold set above them) is given
    # back to the system by glibc, so that the next step faults every page in again
    assert _freed_heap_top_is_trimmed("plain", MALLOC_MMAP_THRESHOLD_="33554432")
    # after thunder's first program the heap keeps up to TRIM_THRESHOLD_BYTES free
    assert host_memory.TRIM_THRESHOLD_BYTES > 120 << 20
    assert not _freed_heap_top_is_trimmed("jit")
    assert _freed_heap_top_is_trimmed("jit", THUNDER_SETTLE_MALLOC="0", MALLOC_MMAP_THRESHOLD_="33554432")


def test_settling_happens_once_per_process():
    host_memory.settle_host_allocator()  # (done by this process's first program, or now)
    assert host_memory.settle_host_allocator() is False
