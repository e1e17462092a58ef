"""Every OpInfo, for every executor x dtype x device: ``thunder.jit(op)`` against PyTorch.

Executors: ``torch`` (torch-language symbols run by the torch executor as the torch call they
model) and ``prims`` (the trace decomposed to prims first, as a fusion executor sees it, each prim
run by the torch executor), so both the symbol's metadata and its decomposition are checked.
Run one operator with ``pytest -k unfold``.
"""

from __future__ import annotations

import pytest
import torch
from opinfos import TESTED_DTYPES, OpInfo, opinfos

import thunder
from thunder.core.trace import from_trace

CUDA = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=[pytest.mark.cuda, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]),
]
EXECUTORS = ("torch", "prims")


def decompose_to_prims(trace):
    """A transform replacing every torch-language symbol by its decomposition (prims and opaque symbols)."""
    new = from_trace(trace)
    out: list = []

    def flatten(bsym):
        if bsym.sym.is_prim or not bsym.subsymbols:
            out.append(bsym)
        else:
            for sub in bsym.subsymbols:
                flatten(sub)

    for bsym in trace.bound_symbols:
        flatten(bsym)
    new.bound_symbols = out
    new.scopes = [out]
    return new


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(_clone(y) for y in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _jit(op: OpInfo, executor: str):
    fn = op.op

    def program(*args, **kwargs):
        return fn(*args, **kwargs)

    return thunder.jit(program, transforms=[decompose_to_prims] if executor == "prims" else None)


def _cases():
    for op in opinfos:
        for executor in EXECUTORS:
            if executor == "prims" and not op.decomposes:
                continue
            for dtype in op.dtypes:
                if dtype not in TESTED_DTYPES or dtype in op.skips:
                    continue
                # the prims run checks decompositions: two dtypes are enough there
                if executor == "prims" and dtype not in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
                    continue
                yield pytest.param(op, executor, dtype, id=f"{op.name}-{executor}-{str(dtype).replace('torch.', '')}")


def _tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _tensors(y)]
    return []


def _shape_and_dtype(x, y) -> None:
    if isinstance(x, torch.Tensor):
        assert x.shape == y.shape and x.dtype == y.dtype
    elif isinstance(x, (tuple, list)):
        assert len(x) == len(y)
        for a, b in zip(x, y):
            _shape_and_dtype(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op,executor,dtype", list(_cases()))
def test_core_vs_torch_consistency(op: OpInfo, executor: str, dtype: torch.dtype, device: str) -> None:
    jfn = _jit(op, executor)
    n = 0
    for sample in op.sample_inputs(device, dtype):
        n += 1
        args, kwargs = _clone(sample.args), _clone(sample.kwargs)
        targs, tkwargs = _clone(sample.args), _clone(sample.kwargs)
        torch.manual_seed(1234)
        expected = op.torch_reference(*targs, **tkwargs)
        torch.manual_seed(1234)
        actual = jfn(*args, **kwargs)
        if op.random and executor == "prims":
            # a decomposition may draw its random numbers differently: metadata only
            _shape_and_dtype(actual, expected)
            continue
        if isinstance(expected, torch.Size):
            assert actual == expected, sample
            continue
        torch.testing.assert_close(
            actual, expected, equal_nan=True, **op.tolerances(dtype), msg=lambda m: f"{sample}: {m}"
        )
        # in-place updates of the inputs are visible to the caller, as in eager
        torch.testing.assert_close(_tensors(args), _tensors(targs), equal_nan=True, **op.tolerances(dtype))
    assert n > 0, f"{op.name} has no sample inputs for {dtype}"


@pytest.mark.parametrize("op", [pytest.param(op, id=op.name) for op in opinfos if op.error_input_generator])
def test_errors(op: OpInfo) -> None:
    """Bad input raises PyTorch's exception type and message, both eagerly and under thunder."""
    n = 0
    for sample, exc_type, msg in op.error_inputs("cpu"):
        n += 1
        with pytest.raises(exc_type, match=msg):
            op.torch_reference(*sample.args, **sample.kwargs)
        with pytest.raises(exc_type, match=msg):
            _jit(op, "torch")(*sample.args, **sample.kwargs)
    assert n > 0


@pytest.mark.parametrize("op", [pytest.param(op, id=op.name) for op in opinfos])
def test_native_symbols(op: OpInfo) -> None:
    """Every torch call an OpInfo makes maps to a torch-language symbol (nothing falls back)."""
    dtype = torch.float32 if torch.float32 in op.dtypes else op.dtypes[0]
    sample = next(iter(op.sample_inputs("cpu", dtype)))
    jfn = _jit(op, "torch")
    jfn(*_clone(sample.args), **_clone(sample.kwargs))
    fallbacks = [r["fn"] for r in thunder.last_interpreter_log(jfn) if r["symbol"] == "fallback"]
    assert not fallbacks, f"{op.name} fell back for {fallbacks}"
