"""Gradients of opaque operations (torch calls thunder has no symbol for, run by PyTorch).

The backward re-runs the operation under PyTorch autograd on detached copies of its saved inputs
and asks ``torch.autograd.grad`` for the inputs' gradients: correct for any differentiable torch
operation, at the cost of recomputing it.
"""

from __future__ import annotations

from itertools import count

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol, flat_proxies
from thunder.transforms.autodiff import get_grad, put_grad

_counter = count()


def _float(p) -> bool:
    return isinstance(p, TensorProxy) and dtypes.is_inexact_dtype(p.dtype)


def _replace_tensors(x, values, pos):
    if isinstance(x, TensorProxy):
        v = values[pos[0]]
        pos[0] += 1
        return v
    if isinstance(x, (tuple, list)):
        return type(x)(_replace_tensors(y, values, pos) for y in x)
    if isinstance(x, dict):
        return {k: _replace_tensors(v, values, pos) for k, v in x.items()}
    return x


def opaque_grad_rule(sym: Symbol):
    """A grad transform for the opaque symbol ``sym``."""
    func = sym.torch_fn

    def rule(*args, **kwargs):
        out = sym(*args, **kwargs)
        inputs = [p for p in flat_proxies((args, kwargs)) if isinstance(p, TensorProxy)]
        outputs = [p for p in flat_proxies(out) if _float(p)]
        wrt = [i for i, p in enumerate(inputs) if _float(p)]
        if not outputs or not wrt:
            return out
        cotangents = [get_grad(o) for o in outputs]

        def backward(*values):
            tensors, cots = values[: len(inputs)], values[len(inputs) :]
            with torch.enable_grad():
                leaves = [t.detach().requires_grad_(i in wrt) for i, t in enumerate(tensors)]
                pos = [0]
                call_args = _replace_tensors(args, leaves, pos)
                call_kwargs = _replace_tensors(kwargs, leaves, pos)
                result = func(*call_args, **call_kwargs)
                flat = [r for r in (result if isinstance(result, (tuple, list)) else (result,)) if torch.is_tensor(r)]
                flat = [r for r in flat if r.is_floating_point() or r.is_complex()]
                grads = torch.autograd.grad(flat, [leaves[i] for i in wrt], cots, allow_unused=True)
            return tuple(g if g is not None else torch.zeros_like(leaves[i]) for g, i in zip(grads, wrt))

        name = f"{sym.print_name.replace('.', '_')}_backward_{next(_counter)}"
        backward_sym = Symbol(
            name,
            lambda *vals: tuple(TensorProxy(like=inputs[i], requires_grad=False) for i in wrt),
            id=f"opaque_backward::{name}",
            is_prim=True,
            print_name=name,
            call_ctx={name: backward},
            executor=sym.executor,
        )
        grads = backward_sym(*inputs, *cotangents)
        for i, g in zip(wrt, grads):
            put_grad(inputs[i], g)
        return out

    return rule
