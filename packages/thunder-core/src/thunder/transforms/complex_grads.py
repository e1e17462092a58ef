"""Gradients of torch-language calls on complex tensors: PyTorch's own, through its autograd.

PyTorch's gradient of a complex function is the conjugate Wirtinger derivative: for a holomorphic ``f`` the
gradient of ``z`` is ``g * conj(f'(z))``, and non-holomorphic functions (``abs``, ``angle``, ``real``, ``sgn``)
each have their own formula. The prims' grad rules are written for real numbers (``sin``'s is ``g * cos(a)``):
applied to complex values they gave ``g * f'(z)``, silently a different gradient (``cos``, ``exp``, ``a * a``,
``a @ b``, campaign 14201), or raised where eager runs (``abs``'s rule calls ``sign``, which refuses complex
numbers). So a torch-language call with a complex tensor among its arguments or results is differentiated as an
opaque operation is (``opaque_grads.py``): the forward runs PyTorch's function, the backward asks
``torch.autograd.grad`` of it, and the gradient is eager's, singular points and refusals included.

View and shape operations keep their own rules: they are real-linear (``transpose``, ``expand``, ``reshape``
move or sum the cotangent, which commutes with conjugation), so those rules give eager's gradient, and their
results stay views the aliasing passes know.
"""

from __future__ import annotations

import functools

import torch

from thunder.core import dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, flat_proxies
from thunder.tracing.dtype_support import COMPLEX_AUTOGRAD_REFUSAL

__all__ = ["complex_grad_rule"]


def _is_complex(p) -> bool:
    return isinstance(p, TensorProxy) and dtypes.is_complex_dtype(p.dtype)


def complex_grad_rule(bsym: BoundSymbol):
    """PyTorch's gradient for ``bsym``, a torch-language call touching a complex tensor; None where another rule
    applies (not a torch-language call, a view, no complex tensor)."""
    sym = bsym.sym
    fns = getattr(sym, "torch_fns", ())
    if not fns or "view" in sym.tags or "random" in sym.tags:
        return None
    if not any(map(_is_complex, bsym.flat_args)) and not any(map(_is_complex, bsym.flat_outs)):
        return None
    if _refuses_complex_autograd(fns[0]):
        return None
    from thunder.tracing.fallback import fallback_symbol
    from thunder.transforms.opaque_grads import opaque_grad_rule

    opaque = fallback_symbol(fns[0])
    if getattr(opaque, "inplace", False):
        return None
    eager_rule = opaque_grad_rule(opaque)
    expected = [p for p in bsym.flat_outs if isinstance(p, TensorProxy)]

    def rule(*args, **kwargs):
        out = eager_rule(*args, **kwargs)
        got = [p for p in flat_proxies(out) if isinstance(p, TensorProxy)]
        same = len(got) == len(expected) and all(
            g.dtype == e.dtype and tuple(g.shape) == tuple(e.shape) for g, e in zip(got, expected)
        )
        # (PyTorch's function returns another structure than the symbol's: the symbol's own rule then)
        return out if same else NotImplemented

    return rule


@functools.cache
def _refuses_complex_autograd(fn) -> bool:
    """Whether PyTorch's autograd refuses ``fn`` of a complex tensor requiring grad (``silu``: "does not support
    automatic differentiation for outputs with complex dtype"). Thunder raises that at the call (the dtype probe of
    ``thunder.tracing.dtype_support``); one reaching autodiff is the in-place form (``F.silu(x, inplace=True)``),
    which eager lets run, differentiated by the real formula, as the symbol's own rule does."""
    try:
        fn(torch.zeros(1, dtype=torch.complex64, requires_grad=True))
    except RuntimeError as e:
        return COMPLEX_AUTOGRAD_REFUSAL in str(e)
    except Exception:  # noqa: BLE001 - another signature: nothing learned
        return False
    return False
