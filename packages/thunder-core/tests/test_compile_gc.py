"""Compiling pauses Python's cyclic garbage collector and gives back the state it found."""

from __future__ import annotations

import gc

import pytest
import torch

import thunder


def test_collector_paused_while_compiling_and_restored():
    seen = []

    def fn(x):
        seen.append(gc.isenabled())  # runs while thunder traces
        return x * 2

    assert gc.isenabled()
    thunder.jit(fn)(torch.ones(2))
    assert seen == [False]
    assert gc.isenabled()


def test_collector_restored_after_a_failed_compile():
    def fn(x):
        raise ValueError("user error while tracing")

    with pytest.raises(ValueError):
        thunder.jit(fn)(torch.ones(2))
    assert gc.isenabled()


def test_collector_left_disabled_when_the_caller_disabled_it():
    gc.disable()
    try:
        thunder.jit(lambda x: x + 1)(torch.ones(2))
        assert not gc.isenabled()
    finally:
        gc.enable()
