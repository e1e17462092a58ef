"""Gradients of opaque operations (torch calls thunder has no symbol for, run by PyTorch).

The backward re-runs the operation under PyTorch autograd on detached copies of its saved inputs
and asks ``torch.autograd.grad`` for the inputs' gradients: correct for any differentiable torch
operation, at the cost of recomputing it. The forward keeps the random number generator's state
from just before the operation and the backward's re-run restores it, so a random operation
(``rrelu``, ``dropout2d``, attention with dropout, ``fractional_max_pool2d``) draws the numbers the
forward drew, never new ones.
"""

from __future__ import annotations

from contextlib import contextmanager
from itertools import count

import torch

from thunder.core import dtypes
from thunder.core.aliasing import OPAQUE_KEEPING_RNG_STATE
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_leaves, tree_map
from thunder.core.symbol import Symbol, flat_proxies
from thunder.transforms.autodiff import get_grad, needs_grad, put_grad

_counter = count()


def _float(p) -> bool:
    return isinstance(p, TensorProxy) and dtypes.is_inexact_dtype(p.dtype)


def _replace_tensors(x, values, pos):
    """``x`` with its tensor proxies replaced by ``values``, in ``flat_proxies``' order (the pytree's)."""

    def replace(y):
        if not isinstance(y, TensorProxy):
            return y
        pos[0] += 1
        return values[pos[0] - 1]

    return tree_map(replace, x)


def opaque_grad_rule(sym: Symbol):
    """A grad transform for the opaque symbol ``sym``."""
    func = _functional(sym)

    def rule(*args, **kwargs):
        inputs = [p for p in flat_proxies((args, kwargs)) if isinstance(p, TensorProxy)]
        # only inputs a gradient can reach: running statistics, class weights and other constants stay out
        # (PyTorch refuses to differentiate some ops with respect to them)
        wrt = [i for i, p in enumerate(inputs) if _float(p) and needs_grad(p)]
        if not wrt:
            return sym(*args, **kwargs)
        uid = next(_counter)
        base = sym.print_name.replace(".", "_")
        cuda = any(isinstance(p, TensorProxy) and p.device.devicetype is DeviceType.CUDA for p in inputs)
        rng_device = (
            next(p.device._torch_device for p in inputs if p.device.devicetype is DeviceType.CUDA) if cuda else None
        )
        forward_sym = _keeping_rng_state(sym, f"{base}_keeping_rng_state_{uid}", rng_device)
        out, rng_state = forward_sym(*args, **kwargs)
        outputs = [p for p in flat_proxies(out) if _float(p)]
        cotangents = [get_grad(o) for o in outputs]

        def backward(*values):
            tensors, state, cots = values[: len(inputs)], values[len(inputs)], values[len(inputs) + 1 :]
            with torch.enable_grad(), _replayed_rng(state, rng_device):
                leaves = [t.detach().requires_grad_(i in wrt) for i, t in enumerate(tensors)]
                pos = [0]
                call_args = _replace_tensors(args, leaves, pos)
                call_kwargs = _replace_tensors(kwargs, leaves, pos)
                result = func(*call_args, **call_kwargs)
                flat = [r for r in tree_leaves(result) if torch.is_tensor(r)]
                flat = [r for r in flat if r.is_floating_point() or r.is_complex()]
                # outputs PyTorch does not differentiate (layer norm's statistics, lu's permutation) carry none
                pairs = [(r, c) for r, c in zip(flat, cots) if r.requires_grad]
                if pairs:
                    grads = torch.autograd.grad(
                        [r for r, _ in pairs], [leaves[i] for i in wrt], [c for _, c in pairs], allow_unused=True
                    )
                else:
                    grads = (None,) * len(wrt)
            return tuple(g if g is not None else torch.zeros_like(leaves[i]) for g, i in zip(grads, wrt))

        name = f"{base}_backward_{uid}"
        backward_sym = Symbol(
            name,
            lambda *vals: tuple(TensorProxy(like=inputs[i], requires_grad=False) for i in wrt),
            id=f"opaque_backward::{name}",
            is_prim=True,
            print_name=name,
            call_ctx={name: backward},
            executor=sym.executor,
            tags=("opaque_backward",),  # (it replays the generator's state: no fusion region traces it)
        )
        grads = backward_sym(*inputs, rng_state, *cotangents)
        for i, g in zip(wrt, grads):
            put_grad(inputs[i], g)
        return out

    return rule


def _functional(sym: Symbol):
    """What runs ``sym``: for an in-place torch function, its functional wrapper (copy, then update the copy)."""
    if getattr(sym, "inplace", False) and sym.call_ctx:
        return sym.call_ctx[sym.print_name]
    return sym.torch_fn


def _rng_state(device):
    return torch.cuda.get_rng_state(device) if device is not None else torch.get_rng_state()


@contextmanager
def _replayed_rng(state, device):
    """Runs its body with the generator's state set to ``state``; the current state is put back after."""
    current = _rng_state(device)
    if device is not None:
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)
    try:
        yield
    finally:
        if device is not None:
            torch.cuda.set_rng_state(current, device)
        else:
            torch.set_rng_state(current)


def _keeping_rng_state(sym: Symbol, name: str, device) -> Symbol:
    """``sym``'s operation that also returns the random generator's state from before it ran."""
    func = _functional(sym)

    def run(*args, **kwargs):
        state = _rng_state(device)
        return func(*args, **kwargs), state

    def meta(*args, **kwargs):
        state = _rng_state(device)
        return sym.meta(*args, **kwargs), TensorProxy(shape=state.shape, dtype=state.dtype, device="cpu")

    # (declared as such in thunder.core.aliasing: PyTorch may return a view of an argument as its first output,
    # which the split must know to save a copy of it before an in-place update overwrites it)
    return Symbol(
        name,
        meta,
        id=f"opaque_rng::{name}",
        is_prim=True,
        print_name=name,
        call_ctx={name: run},
        executor=sym.executor,
        tags=(OPAQUE_KEEPING_RNG_STATE,),
    )
