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
before = mmapped()
t = torch.empty(4 << 20, dtype=torch.uint8)
print(mmapped() > before)
"""


def _four_mib_tensor_is_mmapped(mode: str, **env) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    return out.stdout.strip().splitlines()[-1] == "True"


def test_the_first_program_settles_glibcs_thresholds_so_freed_tensors_stay_in_the_heap():
    # before any program: glibc serves a 4 MiB tensor from a fresh mmap, and freeing it returns the memory
    assert _four_mib_tensor_is_mmapped("plain")
    # after thunder's first program: from the heap (the thresholds are above it), so a step's freed tensors are
    # reused without page faults
    assert not _four_mib_tensor_is_mmapped("jit")
    # switched off: as before
    assert _four_mib_tensor_is_mmapped("jit", THUNDER_SETTLE_MALLOC="0")


def test_settling_happens_once_per_process():
    host_memory.settle_host_allocator()  # (done by this process's first program, or now)
    assert host_memory.settle_host_allocator() is False
