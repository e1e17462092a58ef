"""The prologue: generated Python that checks a call's inputs against what a trace specialised on,
unpacks the tensors the computation takes (arguments, parameters, buffers) and calls it.

A prologue returns ``MISS`` when the inputs do not match, so the caller tries the next cache entry.
Its checks are straight-line generated code, not a loop over descriptions.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.trace import TraceCtx
from thunder.tracing.autocast import any_autocast_enabled, autocast_state

__all__ = ["MISS", "PrologueBuilder"]


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS = _Miss()


def _make_tensor_guard(tensors, strides: bool = False):
    """Dynamo's C++ tensor check (dtype, device, sizes, requires_grad, type; strides when asked) when this
    torch has it."""
    try:
        from torch._C._dynamo.guards import TensorGuards
    except ImportError:  # pragma: no cover - torch without dynamo
        return None
    try:
        return TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.shape) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) if strides else [None] * t.ndim for t in tensors],
        )
    except Exception:  # pragma: no cover - a changed private API: fall back to generated checks
        return None


def _lines_printer(bsym, printer):
    return list(bsym.args[0])


_prologue_code = Symbol("prologue_code", None, id="prologue_code", is_prim=True, python_printer=_lines_printer)


@dataclass
class PrologueBuilder:
    """Accumulates a prologue's checks and unpacking as Python lines."""

    trace: TraceCtx = field(default_factory=lambda: TraceCtx("prologue"))
    checks: bool = True
    lines: list[str] = field(default_factory=list)
    guarded: list = field(default_factory=list)
    # the trace depends on the inputs' layout (strides, storage offsets) and, when it updates an input in
    # place, on which inputs share storage: both become checks
    check_layout: bool = False
    check_offsets: bool = False
    distinct_storages: frozenset = frozenset()  # the argument expressions whose storages must stay distinct

    def constant(self, value: Any, prefix: str) -> str:
        return self.trace.add_constant(value, prefix)

    def emit(self, *lines: str) -> None:
        self.lines.extend(lines)

    def fail_unless(self, condition: str) -> None:
        if self.checks:
            self.lines.append(f"if not ({condition}): return MISS")

    def fail_if(self, condition: str) -> None:
        if self.checks:
            self.lines.append(f"if {condition}: return MISS")

    def check_tensor(self, expr: str, proxy: TensorProxy, example: torch.Tensor | None = None) -> None:
        """Checks the tensor at ``expr`` has ``proxy``'s metadata (one C++ guard for all, when available)."""
        if not self.checks:
            return
        self.guarded.append((expr, proxy, example))

    def _emit_tensor_checks(self) -> None:
        if not self.guarded:
            return
        # the same tensor given twice is checked once, plus an identity check (aliasing is specialised on)
        first_expr: dict[int, str] = {}
        unique = []
        for expr, proxy, example in self.guarded:
            if example is not None and id(example) in first_expr:
                self.lines.append(f"if {expr} is not {first_expr[id(example)]}: return MISS")
                continue
            if example is not None:
                first_expr[id(example)] = expr
            unique.append((expr, proxy, example))
        examples = [ex for _, _, ex in unique]
        known = all(ex is not None for ex in examples)
        guard = _make_tensor_guard(examples, self.check_layout) if known else None
        if guard is not None:
            name = self.constant(guard, "_tensor_guard")
            exprs = ", ".join(expr for expr, _, _ in unique)
            self.lines.append(f"if not {name}.check({exprs}): return MISS")
        else:
            for expr, proxy, ex in unique:
                self._check_tensor_python(expr, proxy)
                if self.check_layout and ex is not None:
                    self.lines.append(f"if {expr}.stride() != {tuple(ex.stride())!r}: return MISS")
        if self.check_offsets and known:
            for expr, _, ex in unique:
                self.lines.append(f"if {expr}.storage_offset() != {ex.storage_offset()}: return MISS")
        args = [(expr, ex) for expr, _, ex in unique if expr in self.distinct_storages and ex is not None]
        if len(args) > 1:
            # as many separate storages as when traced: a call passing aliased tensors needs its own trace
            count = len({ex.untyped_storage().data_ptr() for _, ex in args})
            exprs = ", ".join(f"{expr}.untyped_storage().data_ptr()" for expr, _ in args)
            self.lines.append(f"if len({{{exprs}}}) != {count}: return MISS")

    def _check_tensor_python(self, expr: str, proxy: TensorProxy) -> None:
        dtype = self.constant(proxy.dtype.torch_dtype, "_dtype")
        device = self.constant(proxy.device._torch_device, "_device")
        shape = tuple(proxy.shape)
        self.lines.append(
            f"if not isinstance({expr}, Tensor) or {expr}.dtype is not {dtype} or {expr}.shape != {shape!r} "
            f"or {expr}.device != {device} or {expr}.requires_grad is not {proxy.requires_grad}: return MISS"
        )

    def check_value(self, expr: str, value) -> None:
        """A Python value the trace specialised on: same type and equal (identity for other objects)."""
        if not self.checks:
            return
        t = type(value)
        if value is None or t is bool:
            self.fail_if(f"{expr} is not {value!r}")
        elif t in (int, float, complex, str):
            if t is float and value != value:  # NaN
                self.fail_if(f"type({expr}) is not float or {expr} == {expr}")
            else:
                literal = (
                    repr(value) if t is not float or value not in (float("inf"), float("-inf")) else f"float('{value}')"
                )
                self.fail_if(f"type({expr}) is not {t.__name__} or {expr} != {literal}")
        elif isinstance(value, torch.device):
            self.fail_if(f"{expr} != {self.constant(value, '_device')}")
        else:
            self.fail_if(f"{expr} is not {self.constant(value, '_obj')}")

    def check_grad_and_autocast(self, grad_enabled: bool) -> None:
        if not self.checks:
            return
        self.trace.constants["_is_grad_enabled"] = torch.is_grad_enabled
        self.trace.constants["_any_autocast_enabled"] = any_autocast_enabled
        autocast = any_autocast_enabled()
        self.lines.append(
            f"if _is_grad_enabled() is not {grad_enabled} or _any_autocast_enabled() is not {autocast}: return MISS"
        )
        if autocast:  # the trace applied this autocast policy: the same devices and dtypes must be on
            self.trace.constants["_autocast_state"] = autocast_state
            self.lines.append(f"if _autocast_state() != {self.constant(autocast_state(), '_autocast')}: return MISS")

    def build(self, signature: inspect.Signature, call: str, fn_name: str, computation) -> TraceCtx:
        """The prologue trace: the user's signature, the checks, then ``return computation(...)``."""
        trace = self.trace
        trace.fn_name = "prologue"
        params, defaults = [], {}
        seen_kwonly = False
        for p in signature.parameters.values():
            if p.kind is p.VAR_POSITIONAL:
                params.append(f"*{p.name}")
                seen_kwonly = True
                continue
            if p.kind is p.VAR_KEYWORD:
                params.append(f"**{p.name}")
                continue
            if p.kind is p.KEYWORD_ONLY and not seen_kwonly:
                params.append("*")
                seen_kwonly = True
            if p.default is not p.empty:
                defaults[p.name] = p.default
                params.append(f"{p.name}={self.constant(p.default, '_default')}")
            else:
                params.append(p.name)
            if p.kind is p.POSITIONAL_ONLY and (
                not any(q.kind is q.POSITIONAL_ONLY for q in list(signature.parameters.values())[len(params) :])
            ):
                params.append("/")
        trace.args = params
        self._emit_tensor_checks()
        trace.constants["MISS"] = MISS
        trace.constants["computation"] = computation
        trace.extra_imports = ["from torch import Tensor"]
        trace.bound_symbols = [_prologue_code.bind(tuple(self.lines + [f"return {call}"]), output=None)]
        trace.scopes = [trace.bound_symbols]
        trace.user_fn_name = fn_name
        return trace
