"""Gradients from the OpInfos: for every differentiable op, thunder's gradients (float64) equal
PyTorch autograd's for the op's sample inputs. ``pytest -k <op>`` runs one op."""

from __future__ import annotations

import pytest
import torch
from opinfos import opinfos

import thunder


def _float_tensors(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x] if x.requires_grad else []
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _float_tensors(y)]
    if isinstance(x, dict):
        return [t for y in x.values() for t in _float_tensors(y)]
    return []


def _outputs(x) -> list:
    if isinstance(x, torch.Tensor):
        return [x] if x.requires_grad else []
    if isinstance(x, (tuple, list)):
        return [t for y in x for t in _outputs(y)]
    return []


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    if isinstance(x, (tuple, list)):
        return type(x)(_clone(y) for y in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


GRAD_OPS = [
    pytest.param(op, id=op.name)
    for op in opinfos
    if op.supports_grad and torch.float64 in op.dtypes and not op.random and torch.float64 not in op.skips
]


@pytest.mark.parametrize("op", GRAD_OPS)
def test_grad_matches_pytorch_autograd(op) -> None:
    jfn = thunder.jit(op.op)
    checked = 0
    for sample in op.sample_inputs("cpu", torch.float64, requires_grad=True):
        targs, tkwargs = _clone(sample.args), _clone(sample.kwargs)
        try:
            expected = op.torch_reference(*targs, **tkwargs)
        except RuntimeError:
            continue  # e.g. an in-place update of a leaf that requires grad: eager refuses too
        expected_outs = _outputs(expected)
        inputs = _float_tensors((targs, tkwargs))
        if not expected_outs or not inputs:
            continue
        args, kwargs = _clone(sample.args), _clone(sample.kwargs)
        actual_outs = _outputs(jfn(*args, **kwargs))
        assert len(actual_outs) == len(expected_outs), sample
        torch.manual_seed(0)
        cotangents = [torch.randn_like(o) for o in expected_outs]
        expected_grads = torch.autograd.grad(expected_outs, inputs, cotangents, allow_unused=True)
        actual_grads = torch.autograd.grad(actual_outs, _float_tensors((args, kwargs)), cotangents, allow_unused=True)
        for a, e in zip(actual_grads, expected_grads):
            if e is None or (a is None and e.numel() == 0):
                # no gradient flows (PyTorch's None, or an empty tensor's empty gradient)
                assert a is None or a.numel() == 0 or not a.abs().max().item(), sample
                continue
            assert a is not None, f"{sample}: thunder gave no gradient where PyTorch gives one"
            torch.testing.assert_close(a, e, atol=1e-7, rtol=1e-5, equal_nan=True, msg=lambda m: f"{sample}: {m}")
        checked += 1
    if checked == 0:
        pytest.skip(f"{op.name}: no sample input is differentiable in eager PyTorch")
