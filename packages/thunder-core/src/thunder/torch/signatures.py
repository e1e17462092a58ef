"""PyTorch's own argument names for torch-language symbols.

Symbols are written with short parameter names (``a``, ``b``, ``q``); user code calls the torch
callables with PyTorch's names (``torch.baddbmm(input, batch1=..., batch2=...)``,
``F.scaled_dot_product_attention(query=q, key=k, value=v)``, ``x.flip(dims=...)``). For a keyword
the symbol does not accept, :func:`bind_torch_kwargs` finds the parameter at the same position in
PyTorch's signature (the ATen schemas of the operator, or the Python signature of a function
written in Python) and passes the value to the symbol's parameter at that position. A keyword
that still has no counterpart is dropped when it holds PyTorch's default (``out=None``, ``sparse_grad=False``);
otherwise the call raises ``NotImplementedError``, and the tracer runs the operation opaquely with
PyTorch instead.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["torch_parameter_names", "bind_torch_kwargs", "kwarg_translation", "input_by_position"]

# names under which PyTorch exposes an operator's first tensor argument
_SELF_NAMES = ("input", "self")
# stands for a symbol's ``*args`` (``permute(a, *dims)``): PyTorch's ``dims=`` keyword goes there
_VARARGS = "*"


def _schema_signatures(name: str) -> list[list[tuple[str, bool, Any]]]:
    """``(name, keyword_only, default)`` of each argument, per ATen overload of ``aten::name``."""
    try:
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    except Exception:
        return []
    out = []
    for schema in schemas:
        args = schema.arguments
        # TorchScript's overloads on Python scalars and lists (add.int(a, b), add_.t(self, b)) are
        # not what Python calls reach
        if not args or not str(args[0].type).startswith("Tensor"):
            continue
        # an output argument (out=, values=, indices=) may be left out: its default is None
        out.append(
            [(a.name, a.kwarg_only, a.default_value if a.has_default_value() or not a.is_out else None) for a in args]
        )
    return out


def _python_signature(func) -> list[list[tuple[str, bool, Any]]]:
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return []
    params = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not params:
        return []
    return [[(p.name, p.kind is p.KEYWORD_ONLY, p.default) for p in params]]


def _torch_signatures(func) -> list[list[tuple[str, bool, Any]]]:
    """PyTorch's signatures of ``func``: its Python signature if it is written in Python, else its
    ATen schemas, else the one ``torch.overrides`` documents for it."""
    name = getattr(func, "__name__", None)
    # a function written in Python (F.layer_norm, F.embedding) has the signature its callers use
    sigs = _python_signature(func) if inspect.isfunction(func) else []
    if not sigs and name:
        sigs = _schema_signatures(name.strip("_") if name.startswith("__") else name)
    if not sigs:
        lam = torch.overrides.get_testing_overrides().get(func)
        if lam is not None:
            sigs = _python_signature(lam)
    # PyTorch's Python bindings call an operator's ``self`` argument ``input``
    return [[(("input" if i == 0 and n == "self" else n), kw, d) for i, (n, kw, d) in enumerate(s)] for s in sigs]


def torch_parameter_names(func) -> set[str]:
    """Every argument name PyTorch's signatures of ``func`` accept (empty when none are known)."""
    names = {n for sig in _torch_signatures(func) for n, _, _ in sig}
    if "input" in names:
        names.add("self")
    return names


_input_first: dict[Any, bool] = {}


def input_by_position(func, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``torch.select(input=x, dim=0, index=1)`` as ``torch.select(x, dim=0, index=1)``: the first tensor argument
    given by keyword (``input=``, ``self=``) passed by position, where every PyTorch signature of ``func`` has it
    first. The tracer follows views and updates through an op's first argument: by keyword it went unseen (the view
    an update reached was not the argument's)."""
    if args or not kwargs:
        return args, kwargs
    name = "input" if "input" in kwargs else "self" if "self" in kwargs else None
    if name is None:
        return args, kwargs
    try:
        first = _input_first.get(func)
        if first is None:
            sigs = _torch_signatures(func)
            first = _input_first[func] = bool(sigs) and all(sig and sig[0][0] == "input" for sig in sigs)
    except TypeError:  # (an unhashable callable)
        return args, kwargs
    if not first:
        return args, kwargs
    kwargs = dict(kwargs)
    return (kwargs.pop(name),), kwargs


def _symbol_parameters(sym) -> tuple[list[str], set[str], bool, dict[str, Any]]:
    fn = getattr(sym, "__wrapped__", None) or getattr(sym, "meta", None) or sym
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return [], set(), True, {}
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    accepted = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY and p.kind is not p.VAR_POSITIONAL}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        positional.append(_VARARGS)
    return positional, accepted, var_kw, defaults


class KwargTranslation:
    """How keywords of one torch callable map onto one symbol's parameters."""

    __slots__ = ("accepted", "var_kw", "rename", "defaults_torch", "positional", "defaults")

    def __init__(self, func, sym):
        positional, accepted, var_kw, defaults = _symbol_parameters(sym)
        self.positional = positional
        self.defaults = defaults
        self.accepted = accepted
        self.var_kw = var_kw
        sigs = _torch_signatures(func)
        torch_names = {n for sig in sigs for n, _, _ in sig}
        candidates: dict[str, set[str]] = {}
        self.defaults_torch: dict[str, Any] = {}
        for sig in sigs:
            for i, (name, kw_only, default) in enumerate(sig):
                names = _SELF_NAMES if i == 0 and name == "input" else (name,)
                for n in names:
                    if n in accepted:
                        continue
                    if default is None or type(default) in (bool, int, float, str):
                        self.defaults_torch.setdefault(n, default)
                    # the symbol's parameter at the same position, unless PyTorch has a parameter of
                    # that name too (then the two mean different things)
                    if not kw_only and i < len(positional) and positional[i] not in torch_names:
                        candidates.setdefault(n, set()).add(positional[i])
        self.rename = {n: next(iter(t)) for n, t in candidates.items() if len(t) == 1}

    def __call__(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if self.var_kw:
            return args, kwargs
        out = None
        renamed = False
        for name, value in kwargs.items():
            if name in self.accepted:
                continue
            if out is None:
                out = dict(kwargs)
            del out[name]
            target = self.rename.get(name)
            if target is not None and target not in out:
                out[target] = value
                renamed = True
            elif name in self.defaults_torch and _is_default(value, self.defaults_torch[name]):
                pass  # PyTorch's default for an argument the symbol does not have (out=None, sparse_grad=False)
            else:
                raise NotImplementedError(
                    f"thunder's symbol has no counterpart of PyTorch's argument {name}={type(value).__name__}"
                )
        if out is None:
            return args, kwargs
        if renamed:
            args, out = self._to_positional(args, out)
        if _VARARGS in out:
            value = out.pop(_VARARGS)
            args = (*args, *value) if isinstance(value, (tuple, list, torch.Size)) else (*args, value)
        return args, out

    def _to_positional(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """Keywords of the symbol's positional parameters passed by position, as executors print
        calls with PyTorch's positional order and would not know the symbol's names."""
        positional = [n for n in self.positional if n != _VARARGS]
        last = max((positional.index(k) for k in kwargs if k in positional), default=-1)
        if last < len(args):
            return args, kwargs
        kwargs = dict(kwargs)
        new_args = list(args)
        for name in positional[len(args) : last + 1]:
            if name in kwargs:
                new_args.append(kwargs.pop(name))
            elif name in self.defaults:
                new_args.append(self.defaults[name])
            else:
                raise TypeError(f"missing required argument {name!r}")
        return tuple(new_args), kwargs


def _is_default(value, default) -> bool:
    if value is None or default is None:
        return value is default
    return type(value) is type(default) and value == default


_translations: dict[tuple[Any, Any], KwargTranslation] = {}


def kwarg_translation(func, sym) -> KwargTranslation:
    """The (cached) keyword translation from torch callable ``func`` to symbol ``sym``."""
    key = (func, sym)
    t = _translations.get(key)
    if t is None:
        t = _translations[key] = KwargTranslation(func, sym)
    return t


_accepted_names: dict[Any, tuple[set[str], bool]] = {}


def bind_torch_kwargs(func: Callable, sym, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args``/``kwargs`` of a call of torch callable ``func`` with keywords renamed to ``sym``'s."""
    if not kwargs:
        return args, kwargs
    accepted = _accepted_names.get(sym)
    if accepted is None:
        _, names, var_kw, _ = _symbol_parameters(sym)
        accepted = _accepted_names[sym] = (names, var_kw)
    if accepted[1] or all(k in accepted[0] for k in kwargs):
        return args, kwargs  # the symbol's own names (PyTorch's signatures are read only when needed)
    return kwarg_translation(func, sym)(args, kwargs)
