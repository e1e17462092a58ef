"""Which op chains the triton executor matches by default, and switching the opt-in ones on and off."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from _helpers import DEVICE

import thunder
from thunder_triton import get_executor
from thunder_triton.executor import DEFAULT_PATTERNS


def _swiglu(a, b):
    return F.silu(a) * b


def _claims_swiglu() -> bool:
    a, b = (torch.randn(4, 8, device=DEVICE) for _ in range(2))
    jfn = thunder.jit(_swiglu, executors=thunder.discover())
    torch.testing.assert_close(jfn(a, b), _swiglu(a, b))
    return "triton_swiglu(" in str(thunder.last_traces(jfn)[-1])


def test_a_fresh_import_matches_the_default_patterns_only():
    code = "from thunder_triton import get_executor; print(sorted(get_executor().patterns))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[-2] == str(sorted(DEFAULT_PATTERNS))
    assert set(DEFAULT_PATTERNS) < set(get_executor().known_patterns)


def test_swiglu_is_opt_in():
    ex = get_executor()
    ex.patterns.clear()
    ex.enable_patterns(*DEFAULT_PATTERNS)
    assert not _claims_swiglu()
    ex.enable_patterns("swiglu")
    assert _claims_swiglu()
    ex.disable_patterns("swiglu")
    assert not _claims_swiglu()


def test_an_unknown_pattern_is_named():
    with pytest.raises(ValueError, match=r"unknown triton pattern 'swishglu'; known: .*swiglu"):
        get_executor().enable_patterns("swishglu")
