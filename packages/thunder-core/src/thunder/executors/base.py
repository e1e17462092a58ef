"""Executor classes: an executor claims bound symbols it can run, with an implementation per symbol."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from thunder.core.symbol import Symbol

__all__ = ["Executor", "OperatorExecutor", "FusionExecutor", "ImplInfo"]


@dataclass
class ImplInfo:
    """How an executor implements a symbol: directly with ``symbol`` or through ``execution_transform``."""

    symbol: Symbol | None = None
    checker: Callable[..., bool] | None = None
    execution_transform: Callable | None = None
    grad_transform: Callable | None = None


def _always(*args, **kwargs) -> bool:
    return True


class Executor:
    """Base class of executors. ``name`` identifies it in traces, registries and ``jit(executors=[...])``."""

    def __init__(self, name: str, *, version: Any = None):
        self.name = name
        self.version = version
        self.implmap: dict[str, ImplInfo] = {}
        # (module, attribute name, original function, symbol) for register_operator(replaces=...)
        self.replacements: list[tuple[Any, str, Callable, Symbol]] = []

    def __repr__(self) -> str:
        return f"thunder.extend.{type(self).__name__}('{self.name}')"

    def is_available(self) -> bool:
        """Whether this executor can run on this machine (overridden by executors with runtime needs)."""
        return True

    def get_impl(self, sym: Symbol) -> ImplInfo | None:
        return self.implmap.get(sym.id)

    def can_execute(self, bsym) -> bool:
        """Whether this executor executes ``bsym`` (its own operator, or an implementation whose checker accepts)."""
        sym = bsym.sym
        if sym.executor is self:
            return True
        impl = self.implmap.get(sym.id)
        if impl is None:
            return False
        return impl.checker is None or bool(impl.checker(*bsym.args, **bsym.kwargs))

    def register_implementation(
        self,
        symbol: Symbol,
        op: Symbol | None = None,
        *,
        checker: Callable[..., bool] | None = None,
        execution_transform: Callable | None = None,
        grad_transform: Callable | None = None,
    ) -> None:
        """Registers how this executor implements ``symbol`` (a torch-language symbol or a prim).

        ``op`` executes it directly; or ``execution_transform`` (a function with ``symbol``'s
        signature, calling this executor's operators and any torch operations) replaces it.
        ``checker`` (same signature) says whether this executor takes a given call; a
        ``grad_transform`` (same signature; calls forward operations, ``get_grad`` and
        ``put_grad(s)``) defines its gradient.
        """
        if op is None and execution_transform is None and grad_transform is None:
            raise ValueError("register_implementation needs op, execution_transform or grad_transform")
        if not isinstance(symbol, Symbol):
            raise TypeError(f"register_implementation expects a thunder Symbol, got {type(symbol).__name__}")
        self.implmap[symbol.id] = ImplInfo(op, checker or _always, execution_transform, grad_transform)


class OperatorExecutor(Executor):
    """An executor of individual operators (kernels), each registered with ``register_operator``."""

    def register_operator(
        self,
        name: str,
        *,
        meta: Callable | None = None,
        like: Callable | None = None,
        fn: Callable,
        replaces: Callable | None = None,
        tags=(),
    ) -> Symbol:
        """Registers the operator ``name`` executed by ``fn`` and returns its symbol.

        ``meta`` computes output proxies from input proxies; alternatively ``like`` is a
        traceable function (thunder operations on proxies) describing what ``fn`` computes, which
        gives both metadata and a decomposition (so the operator is differentiable).
        ``replaces=some_function`` makes tracing record this operator wherever the user's code
        calls ``some_function``.
        """
        if (meta is None) == (like is None):
            raise ValueError("register_operator needs exactly one of meta= or like=")
        if not name.isidentifier():
            raise ValueError(f"operator name {name!r} must be a Python identifier")
        sym = Symbol(
            name,
            like if like is not None else meta,
            id=f"{self.name}::{name}",
            is_prim=like is None,
            print_name=name,
            call_ctx={name: fn},
            tags=tags,
            executor=self,
        )
        sym.impl_fn = fn
        self.implmap[sym.id] = ImplInfo(sym)
        if replaces is not None:
            module = _import_module_of(replaces)
            self.replacements.append((module, replaces.__name__, replaces, sym))
        return sym


def _import_module_of(fn):
    import importlib

    module_name = getattr(fn, "__module__", None)
    if module_name is None:
        raise ValueError(f"replaces={fn!r}: cannot find the module that defines it")
    return importlib.import_module(module_name)


class FusionExecutor(Executor):
    """An executor that compiles regions of consecutive fusible bound symbols into single callables."""

    def can_fuse(self, bsym) -> bool:
        return self.can_execute(bsym)

    def fusion_pass(self, trace):
        raise NotImplementedError(f"{self.name} does not implement fusion_pass")
