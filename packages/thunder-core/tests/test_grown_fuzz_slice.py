"""A derandomised slice of the grown fuzzer (``grown_fuzz.py``) in CI: a fixed seed, a few dozen programs, each
compared with eager (outputs, arguments and leaves after the call, version counters, gradients through the
outputs and the updated arguments, on two calls). A clear refusal (a data-dependent value, an unsupported
update of the caller's tensor) passes; any other difference fails, printing the program.

Left out while its class is open (issue 25), and only that:
- ``x.set_(y)``: ``set_`` under ``inference_mode`` of a leaf requiring grad, then a view of it, gives other
  gradients (seed 25, program 12).

Whether each output is a view (``_base``) is checked too.
"""

from __future__ import annotations

import random
import warnings

import grown_fuzz
import pytest

SEED = 25
PROGRAMS = 40
OPEN_CLASSES = frozenset({"{x}.set_({y})"})


def _program(k: int) -> str:
    seed = SEED * 100000 + k
    return grown_fuzz.gen(random.Random(seed), seed, exclude=OPEN_CLASSES)


@pytest.mark.parametrize("k", range(PROGRAMS))
def test_grown_program_matches_eager(k):
    src = _program(k)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            grown_fuzz.check(src)
    except grown_fuzz.Fail as fail:
        msg = str(fail)
        if msg.startswith("error") and grown_fuzz.REFUSAL.search(msg):
            return  # a clear refusal, naming the user's line
        pytest.fail(f"{msg}\n{src}", pytrace=False)
