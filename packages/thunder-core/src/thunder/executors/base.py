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
    """Base class of executors. ``name`` identifies it in traces, registries and ``jit(executors=[...])``.

    ``priority`` orders the executors ``thunder.discover()`` returns (higher first).
    """

    def __init__(self, name: str, *, version: Any = None, priority: int = 0):
        self.name = name
        self.version = version
        self.priority = priority
        self.implmap: dict[str, ImplInfo] = {}
        # (module, attribute name, original function, symbol) for register_operator(replaces=...)
        self.replacements: list[tuple[Any, str, Callable, Symbol]] = []

    def __repr__(self) -> str:
        return f"thunder.extend.{type(self).__name__}('{self.name}')"

    def is_available(self) -> bool:
        """Whether this executor can run on this machine (``unavailable_reason()`` is ``None``)."""
        return self.unavailable_reason() is None

    def unavailable_reason(self) -> str | None:
        """Why this executor cannot run on this machine (a missing runtime, no GPU), or ``None`` if it can.

        Executors with runtime needs override this; ``thunder.discover()`` drops executors that
        return a reason and ``thunder.plugins.report()`` prints it.
        """
        return None

    def rewrite_trace(self, trace):
        """Rewrites the computation trace right after tracing, before user transforms and autodiff.

        The default returns ``trace`` unchanged. An executor overrides it to match patterns of
        traced operations (say, the ``mul``/``mean``/``rsqrt`` chain a hand-written RMSNorm
        records) and to replace each match by one bound symbol of a composite symbol whose
        ``subsymbols`` are the matched bound symbols, so that when no executor claims the
        composite the original operations run (and are differentiated) unchanged. It returns a
        new trace (``thunder.core.trace.from_trace``), or ``trace`` itself when nothing matched.
        """
        return trace

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
    """An executor that compiles regions of fusible bound symbols into single callables.

    In the claiming pass a fusion executor claims the bound symbols ``can_fuse`` accepts (leaving
    them as they are); its ``fusion_pass`` then groups them into regions with the shared
    partitioner in ``thunder.executors.fusion`` and calls ``fuse_region`` on each, which
    returns the callable that executes the region. A region prints in the trace as one call,
    ``<region_name><n>(...)``, with its contents as comments.

    Subclasses implement ``fuse_region`` and, optionally, ``can_fuse`` (by default: a symbol this
    executor has an implementation for, or a composite whose whole decomposition it can fuse).
    Regions with fewer than ``min_region_size`` bound symbols, or that ``worth_fusing`` declines
    otherwise, are handed back to the other executors. An executor whose regions take seconds to compile sets ``compiles_slowly``; its callables
    should compile on their first call, which thunder.jit then makes from a background thread with
    example inputs of the region's metadata.
    """

    region_name: str = "fusion"
    min_region_size: int = 1
    # Compiling a region takes long (seconds, as Inductor's or nvFuser's first compile does): thunder.jit
    # then runs a new program unfused at once and swaps in its fused version when a background thread has
    # compiled the regions (``thunder.jit(..., fusion="background")``, see thunder.executors.tiers).
    compiles_slowly: bool = False
    # The program's write-back of a new value a region computes into an argument it updates (a BatchNorm's running
    # statistics) may be done by the region itself, as its last operation (thunder.executors.fusion._WriteBacks): the
    # region then writes that argument in place, and its callable must write the very tensor it is given.
    fuses_write_backs: bool = False

    def can_fuse(self, bsym) -> bool:
        """Whether ``bsym`` can be part of one of this executor's regions."""
        if self.can_execute(bsym):
            return True
        subs = bsym.subsymbols
        return bool(subs) and all(self.can_fuse(s) for s in subs)

    def worth_fusing(self, bound_symbols) -> bool:
        """Whether a region of these bound symbols (claimed by this executor, in order) is worth compiling.

        By default: it has at least ``min_region_size`` of them. A region declined goes back to the other
        executors in the list, bound symbol by bound symbol.
        """
        return len(bound_symbols) >= self.min_region_size

    def fuse_region(self, region) -> Callable:
        """Compiles ``region`` (a ``thunder.executors.fusion.Region``) into a callable.

        The callable takes the region's inputs (``region.inputs``, in order) and returns its
        outputs (``region.outputs``) as a tuple.
        """
        raise NotImplementedError(f"{self.name} does not implement fuse_region")

    def rematerialize(self, forward, backward):
        """Moves work across the forward/backward boundary; returns ``(forward, backward)``.

        ``thunder.jit`` calls it on training compiles, after the forward/backward split and
        before claiming, with the augmented forward trace (returning ``(outputs,
        saved_for_backward)``) and the backward trace. By default nothing changes; an executor
        that fuses cheap operations can recompute them in the backward instead of saving them,
        e.g. with :func:`thunder.extend.rematerialize_forward_backward`.
        """
        return forward, backward

    def fusion_pass(self, trace):
        """Replaces the bound symbols this executor claimed by calls of fused regions."""
        from thunder.executors.fusion import fusion_pass

        return fusion_pass(trace, self)
