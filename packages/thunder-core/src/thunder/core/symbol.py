"""``Symbol`` (an operation) and ``BoundSymbol`` (one call of it recorded in a trace).

Calling a symbol while a trace is current records a ``BoundSymbol``. A primitive's ``meta``
computes output proxies from input proxies; a composite's ``meta`` is its implementation in
terms of other symbols, and what it calls is recorded as the bound symbol's ``subsymbols``
(its decomposition).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Size, SymFloat, SymInt

from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_leaves, tree_map
from thunder.core.symbolic import size_proxies
from thunder.core.trace import _current

__all__ = ["Symbol", "BoundSymbol", "flat_proxies"]


class Symbol:
    """An operation that can be recorded into a trace.

    ``print_name`` is how calls print (``ltorch.add``, ``torch.nn.functional.linear``); ``imports``
    are the import lines the printed call needs; ``call_ctx`` maps names used by the printed call
    to the Python objects that execute it. ``python_printer`` (optional) prints a call as custom
    Python lines instead of a function call.
    """

    __slots__ = (
        "name",
        "meta",
        "id",
        "is_prim",
        "print_name",
        "imports",
        "call_ctx",
        "tags",
        "executor",
        "python_printer",
        "method_name",
        "_module",
        "__dict__",
    )

    def __init__(
        self,
        name: str,
        meta: Callable | None,
        *,
        id: str | None = None,
        is_prim: bool = False,
        print_name: str | None = None,
        imports: Sequence[str] = (),
        call_ctx: dict[str, Any] | None = None,
        tags: Sequence[str] = (),
        executor=None,
        python_printer: Callable | None = None,
        method_name: str | None = None,
    ):
        self.name = name
        self.meta = meta
        self.id = id if id is not None else name
        self.is_prim = is_prim
        self.print_name = print_name if print_name is not None else name
        self.imports = tuple(imports)
        self.call_ctx = call_ctx
        self.tags = tuple(tags)
        self.executor = executor
        self.python_printer = python_printer
        self.method_name = method_name

    def __repr__(self) -> str:
        return f"[Symbol name={self.name}]"

    @property
    def __signature__(self) -> inspect.Signature | None:
        """The signature of its meta (or ``like=``) function: ``inspect.signature(ltorch.silu)`` works."""
        if self.meta is None:
            return None
        try:
            return inspect.signature(self.meta)
        except (TypeError, ValueError):
            return None

    def __call__(self, *args, **kwargs):
        trace = _current[-1]
        if trace is None:
            raise RuntimeError(
                f"{self.name} is a thunder symbol; it can only be called while thunder traces a program "
                "(inside a function compiled with thunder.jit)"
            )
        hook = trace.user_call_hook
        if hook is not None and len(trace.scopes) == 1:
            return hook(self, args, kwargs)
        return self.record(trace, args, kwargs)

    def record(self, trace, args: tuple, kwargs: dict):
        """Runs the meta function and appends the bound symbol to the trace's current scope."""
        if self.is_prim:
            out = self.meta(*args, **kwargs)
            subsymbols = ()
        else:
            scopes = trace.scopes
            scopes.append([])
            try:
                out = self.meta(*args, **kwargs)
            finally:
                subsymbols = scopes.pop()
            if not subsymbols and _returns_an_input(out, args, kwargs):
                return out
        trace.scopes[-1].append(BoundSymbol(self, args, kwargs, out, subsymbols))
        return out

    def bind(self, *args, output, subsymbols=(), **kwargs) -> BoundSymbol:
        return BoundSymbol(self, args, kwargs, output, subsymbols)


def _returns_an_input(out, args, kwargs) -> bool:
    """Whether a composite returned one of its inputs unchanged (nothing to record)."""
    if isinstance(out, Proxy):
        for a in args:
            if a is out:
                return True
    inputs = flat_proxies(args)
    if kwargs:
        flat_proxies(kwargs, inputs)
    # every output is an input (or there are none): an identity, e.g. a one-piece split
    return all(any(p is o for p in inputs) for o in flat_proxies(out))


# values that hold no proxy: walked past without asking the pytree module (the common case of a
# symbol's arguments is a tuple of proxies and such values)
ATOMIC_TYPES = frozenset(
    (int, float, bool, complex, str, type(None), type(Ellipsis), torch.dtype, torch.device, torch.Size)
    + (torch.memory_format, torch.layout)
)
# (a torch.Size may hold symbolic sizes: flat_proxies looks inside)
_NO_PROXIES = ATOMIC_TYPES - {torch.Size}


def flat_proxies(x, acc: list | None = None) -> list:
    """The proxies inside ``x`` (any pytree: tuples, lists, dicts, slices, registered nodes), in order."""
    if acc is None:
        acc = []
    if isinstance(x, Proxy):
        acc.append(x)
        return acc
    t = type(x)
    if t is tuple or t is list:
        for y in x:
            if isinstance(y, Proxy):
                acc.append(y)
            elif type(y) not in _NO_PROXIES:
                flat_proxies(y, acc)
    elif t is dict:
        for y in x.values():
            if isinstance(y, Proxy):
                acc.append(y)
            elif type(y) not in _NO_PROXIES:
                flat_proxies(y, acc)
    elif t is slice:
        flat_proxies((x.start, x.stop, x.step), acc)
    elif t is SymInt or t is SymFloat:  # computed from symbolic sizes: the size variables it reads
        acc.extend(size_proxies(x))
    elif t is Size:  # its symbolic sizes
        for s in x:
            if type(s) is SymInt:
                acc.extend(size_proxies(s))
    elif t not in _NO_PROXIES:
        for leaf in tree_leaves(x):
            if isinstance(leaf, Proxy):
                acc.append(leaf)
            elif type(leaf) is SymInt or type(leaf) is SymFloat or type(leaf) is Size:
                flat_proxies(leaf, acc)
    return acc


def swap_proxies(x, mapping: dict[str, Proxy]):
    """``x`` with each proxy whose name is in ``mapping`` replaced."""
    if isinstance(x, Proxy):
        return mapping.get(x.name, x)
    t = type(x)
    if t is tuple:
        return tuple(swap_proxies(y, mapping) for y in x)
    if t is list:
        return [swap_proxies(y, mapping) for y in x]
    if t is dict:
        return {k: swap_proxies(v, mapping) for k, v in x.items()}
    if t in ATOMIC_TYPES:
        return x
    if t is slice:
        return slice(*(swap_proxies(y, mapping) for y in (x.start, x.stop, x.step)))
    return tree_map(lambda leaf: mapping.get(leaf.name, leaf) if isinstance(leaf, Proxy) else leaf, x)


class BoundSymbol:
    """A recorded call: ``output = sym(*args, **kwargs)``, with its decomposition in ``subsymbols``.

    ``source`` is the user's ``(filename, lineno)`` that made the call, when known.
    """

    __slots__ = ("sym", "args", "kwargs", "output", "subsymbols", "source", "_flat_args", "_flat_outs", "header")

    def __init__(self, sym: Symbol, args: tuple, kwargs: dict, output, subsymbols=(), source=None):
        self.sym = sym
        self.args = args
        self.kwargs = kwargs
        self.output = output
        self.subsymbols = subsymbols
        self.source = source
        self._flat_args = None
        self._flat_outs = None
        self.header = None

    @property
    def flat_args(self) -> list:
        fa = self._flat_args
        if fa is None:
            fa = flat_proxies(self.args)
            if self.kwargs:
                flat_proxies(self.kwargs, fa)
            self._flat_args = fa
        return fa

    @property
    def flat_outs(self) -> list:
        fo = self._flat_outs
        if fo is None:
            fo = self._flat_outs = flat_proxies(self.output)
        return fo

    def from_bsym(self, **changes) -> BoundSymbol:
        b = BoundSymbol(
            changes.get("sym", self.sym),
            changes.get("args", self.args),
            changes.get("kwargs", self.kwargs),
            changes.get("output", self.output),
            changes.get("subsymbols", self.subsymbols),
            changes.get("source", self.source),
        )
        b.header = changes.get("header", self.header)
        return b

    def swap_proxies(self, mapping: dict[str, Proxy]) -> BoundSymbol:
        """This call with each proxy whose name is in ``mapping`` replaced (itself where none is: a name its
        subsymbols read or write that is neither its argument nor its output is made inside it, so a mapping of
        the trace's names cannot reach it)."""
        if not mapping:
            return self
        for p in self.flat_args:
            if p.name in mapping:
                break
        else:
            for p in self.flat_outs:
                if p.name in mapping:
                    break
            else:
                return self
        return self.from_bsym(
            args=swap_proxies(self.args, mapping),
            kwargs=swap_proxies(self.kwargs, mapping),
            output=swap_proxies(self.output, mapping),
            subsymbols=[s.swap_proxies(mapping) for s in self.subsymbols],
        )

    def __repr__(self) -> str:
        from thunder.core.codegen import bsym_lines

        return "\n".join(bsym_lines(self, indent=0))
