"""Functional transforms over jitted functions: ``grad``, ``vjp``, ``value_and_grad``.

Each returns a new jitted function (with the original's executors and options) whose trace
computes the requested values; ``thunder.last_traces`` shows its program.
"""

from __future__ import annotations

from collections.abc import Callable

import thunder.torch as ltorch
from thunder.core import devices, dtypes, prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import flat_proxies
from thunder.core.trace import TraceCtx, from_trace, timed_pass, tracectx
from thunder.transforms import (
    arithmetic_grads,  # noqa: F401
    prim_grads,  # noqa: F401
    torch_grads,  # noqa: F401
)
from thunder.transforms.autodiff import build_joint, emit_backward

__all__ = ["grad", "vjp", "value_and_grad"]


def _float_tensor(p) -> bool:
    return isinstance(p, TensorProxy) and dtypes.is_inexact_dtype(p.dtype)


def _ones_like(p: TensorProxy) -> TensorProxy:
    return ltorch.full(p.shape, 1.0, device=devices.to_torch_device(p.device), dtype=p.dtype.torch_dtype)


class _Differentiate:
    """A trace transform: the program's outputs and/or the gradients of its float tensor inputs."""

    def __init__(self, executors, *, returns: str, cotangent_prefix: str | tuple[str, ...] | None = None):
        self.executors = executors
        self.returns = returns  # "grads", "value_and_grads" or "vjp"
        self.cotangent_prefix = cotangent_prefix
        self.__name__ = {"grads": "Grad", "value_and_grads": "Value and grad", "vjp": "VJP"}[returns]

    def __call__(self, trace: TraceCtx) -> TraceCtx:
        with timed_pass(self.__name__) as t:
            args = [a for a in trace.args if isinstance(a, TensorProxy)]
            if self.cotangent_prefix:
                cotangent_inputs = [a for a in args if a.name.startswith(self.cotangent_prefix)]
                primal_inputs = [a for a in args if not a.name.startswith(self.cotangent_prefix)]
            else:
                cotangent_inputs, primal_inputs = [], args
            wrt = {a.name for a in primal_inputs if _float_tensor(a)}
            work, joint = build_joint(trace, wrt, self.executors)
            structure = trace.bound_symbols[-1].args[0]
            if self.returns == "vjp":
                structure = structure[0] if isinstance(structure, tuple) and len(structure) == 2 else structure
            outputs = [p for p in flat_proxies(structure) if _float_tensor(p)]
            seed_bsyms: list = []
            with tracectx(work):
                work.scopes.append(seed_bsyms)
                try:
                    if cotangent_inputs:
                        seeds = {o.name: c for o, c in zip(outputs, cotangent_inputs)}
                    else:
                        seeds = {o.name: _ones_like(o) for o in outputs}
                finally:
                    work.scopes.pop()
            backward, acc = emit_backward(work, joint, seeds)
            grads = [acc.get(a.name) for a in primal_inputs if _float_tensor(a)]
            result = grads if self.returns == "grads" else (structure, grads)
            new = from_trace(work)
            new.bound_symbols = (
                list(joint.forward) + seed_bsyms + backward + [prims.python_return.bind(result, output=None)]
            )
            new.scopes = [new.bound_symbols]
            return t.stamp(new)


def _rejit(fn, transform_factory, *, wrapper=None) -> Callable:
    import thunder

    cd = getattr(fn, "_lc_cd", None)
    if cd is not None:
        original = cd.fn
        executors = cd.executors
        options = dict(cache=cd.cache_option, transforms=list(cd.transforms), **cd.compile_options)
    else:
        original, executors, options = fn, thunder.extend.get_default_executors(), {}
    target = wrapper(original) if wrapper is not None else original
    options["transforms"] = options.get("transforms", []) + [
        transform_factory(thunder.executors.registry.resolve_executors(executors))
    ]
    return thunder.jit(target, executors=executors, disable_torch_autograd=True, **options)


def grad(fn: Callable) -> Callable:
    """A jitted function returning the gradients of ``fn``'s float tensor inputs (cotangents of ones)."""
    return _rejit(fn, lambda ex: _Differentiate(ex, returns="grads"))


def value_and_grad(fn: Callable) -> Callable:
    """Like :func:`grad`, returning ``(fn's outputs, gradients)``."""
    return _rejit(fn, lambda ex: _Differentiate(ex, returns="value_and_grads"))


def vjp(fn: Callable) -> Callable:
    """``vjp(fn)(primals, cotangents)`` returns ``(fn(*primals), gradients of the primals' float tensors)``."""

    def wrapper(original):
        def vjp_body(primals, cotangents):
            return original(*primals), cotangents

        # not functools.wraps: its __wrapped__ would make the signature the original's
        vjp_body.__name__ = vjp_body.__qualname__ = f"vjp_of_{getattr(original, '__name__', 'fn')}"
        return vjp_body

    # (a lone cotangent tensor's proxy is t_cotangents: "cotangents" is a name the backward's code reads)
    prefixes = ("cotangents", "t_cotangents")
    return _rejit(fn, lambda ex: _Differentiate(ex, returns="vjp", cotangent_prefix=prefixes), wrapper=wrapper)
