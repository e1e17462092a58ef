"""Symbolic sizes: tensor dimensions traced as symbols instead of numbers.

A dimension traced symbolically is a ``torch.SymInt`` over a :class:`SizeEnv` (PyTorch's
``ShapeEnv``, which does the algebra). Meta functions compute with it like with an int; each
comparison the trace's Python code depends on (``if n > 1``, a broadcast check) is recorded as a
guard, and anything that needs a plain int (``range(n)``, a fallback op run on meta tensors)
specialises the symbol on its value, also as a guard. The prologue checks those guards, so a
trace answers exactly the calls it is valid for: relations, not sizes.

In the trace a symbol is a :class:`SizeProxy` (an argument of the computation, read from the
input's shape by the prologue); a size computed from symbols prints as a Python expression of
them (``t1 = ltorch.reshape(t0, (s0 * 4, 16))``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from thunder.core.proxies import Proxy, plain_sizes

__all__ = [
    "SizeProxy",
    "SizeEnv",
    "is_symbolic",
    "is_data_dependent",
    "may_broadcast",
    "same_shape",
    "has_symbolic",
    "hint",
    "hints",
    "specialize",
    "size_proxies",
    "print_size",
    "current_size_env",
]

SymInt = torch.SymInt


class SizeProxy(Proxy):
    """A symbolic size in a trace: an ``int`` argument of the computation (the prologue reads it from
    an input's shape)."""

    __slots__ = ("symbol", "source", "value")

    def __init__(self, name: str, *, symbol, source: str, value: int):
        Proxy.__init__(self, name)
        self.symbol = symbol
        self.source = source  # how the prologue reads it, e.g. "x.shape[1]"
        self.value = value  # the size of the call that was traced

    def type_string(self) -> str:
        return f"int {self.value} (symbolic: {self.source})"


class _CallableStr(str):
    """A string that also answers when called (``Source.name`` is a property in some torch versions and a
    method in others)."""

    def __call__(self) -> str:
        return str(self)


class _LocalGuardSource:
    """``GuardSource.LOCAL`` for torch versions that read ``Source.guard_source`` as a property or call it."""

    def __call__(self):
        from torch._guards import GuardSource

        return GuardSource.LOCAL

    def __getattr__(self, name):
        return getattr(self(), name)


def _source_class():
    from torch._guards import Source

    @dataclasses.dataclass(frozen=True)
    class InputSize(Source):
        expr: str = ""

        @property
        def name(self):
            return _CallableStr(self.expr)

        @property
        def guard_source(self):
            return _LocalGuardSource()

        @property
        def _name_template(self) -> str:
            return self.expr

    return InputSize


_SOURCE = []
_active: list = [None]


def current_size_env() -> SizeEnv | None:
    """The size environment of the trace being recorded (or transformed)."""
    env = _active[-1]
    if env is None:
        from thunder.core.trace import get_tracectx

        trace = get_tracectx()
        if trace is not None:
            env = trace.tags.get("size_env")
    return env


class SizeEnv:
    """The symbols of one trace, the guards recorded on them, and their trace variables."""

    def __init__(self, make_name):
        self._shape_env = None  # made on first use (importing PyTorch's symbolic shapes takes a while)
        self._make_name = make_name
        self.proxies: dict[Any, SizeProxy] = {}  # sympy symbol -> trace variable
        self.order: list[SizeProxy] = []  # the input sizes (the computation's size arguments)
        self.pending: list = []  # (tensor proxy, dim, SizeProxy): data-dependent sizes to read after their op
        self._fake_mode = None
        self._printer = None  # (printer, number of symbols it knows)

    @property
    def shape_env(self):
        env = self._shape_env
        if env is None:
            from torch.fx.experimental.symbolic_shapes import ShapeEnv

            if not _SOURCE:
                _SOURCE.append(_source_class())
            # duck sizing off: two inputs of equal size are two symbols (equal only where the trace relies on it)
            env = self._shape_env = ShapeEnv(duck_shape=False)
            register(self)
        return env

    def bind_data_dependent(self, out) -> None:
        """Sizes of an op's outputs that depend on tensor values (``nonzero``, a boolean mask) become variables
        of the trace, read from the output after the op (``u0 = t5.shape[0]``)."""
        for t in out if isinstance(out, (tuple, list)) else (out,):
            shape = getattr(t, "shape", None)
            if shape is None or not hasattr(t, "dtype"):
                continue
            for d, s in enumerate(shape):
                if type(s) is not SymInt or s.node.hint is not None:
                    continue
                expr = s.node.expr
                if expr.is_Symbol and expr not in self.proxies:
                    p = SizeProxy(self._make_name("u"), symbol=expr, source=None, value=None)
                    self.proxies[expr] = p
                    self.pending.append((t, d, p))

    def __enter__(self):
        _active.append(self)
        return self

    def __exit__(self, *exc):
        _active.pop()

    def fake_mode(self):
        """A FakeTensorMode over this environment: an op with no meta function of ours runs in it, so its output
        sizes come out as expressions of the symbols (and its decisions on sizes as guards)."""
        mode = self._fake_mode
        if mode is None:
            from torch._subclasses.fake_tensor import FakeTensorMode

            mode = self._fake_mode = FakeTensorMode(shape_env=self.shape_env, allow_non_fake_inputs=True)
        return mode

    def take_pending(self) -> list:
        pending, self.pending = self.pending, []
        return pending

    def size(self, value: int, source: str) -> int | SymInt:
        """A symbolic size for the input dimension read by ``source`` (0 and 1 stay numbers: they are special
        in broadcasting and squeezing, and a trace specialises on them)."""
        if value < 2:
            return value
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        shape_env = self.shape_env
        src = _SOURCE[0](source)
        symbol = shape_env.create_symbol(value, src, dynamic_dim=DimDynamic.DYNAMIC)
        symint = shape_env.create_symintnode(symbol, hint=value, source=src)
        proxy = SizeProxy(self._make_name("s"), symbol=symbol, source=source, value=value)
        self.proxies[symbol] = proxy
        self.order.append(proxy)
        return symint

    def guards(self, local_name=lambda p: p.name) -> list[str]:
        """Python conditions over the symbols (named ``local_name(size_proxy)``) that a call must satisfy to
        reuse the trace."""
        if self._shape_env is None:
            return []
        printer = _printer(self, local_name)
        conditions = []
        for p in self.order:  # the range every symbol was traced with (0 and 1 are specialised)
            conditions.append(f"{local_name(p)} >= 2")
        for guard in self.shape_env.guards:
            conditions.append(printer.doprint(guard.expr))
        return conditions


def specialize(x) -> None:
    """Makes the symbolic sizes in ``x`` (a shape, a SymInt, a pytree of them) plain numbers of the trace, each
    guarded to equal its value in the traced call."""
    if type(x) is SymInt:
        int(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            specialize(y)


def known(condition) -> bool:
    """A condition on sizes as the trace relies on it: a number's truth; for symbolic sizes the hinted answer, kept
    as a guard; for data-dependent sizes (no value while tracing) True only when it holds for every value,
    else False (so a size from a boolean mask is not taken for the 1 of broadcasting)."""
    if type(condition) is bool:
        return condition
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    return guard_or_false(condition)


def is_data_dependent(x) -> bool:
    """Whether the size ``x`` is known only when the program runs (nonzero's, a boolean mask's: no value while
    tracing)."""
    return type(x) is SymInt and x.node.hint is None


def same_shape(a, b) -> bool:
    """Whether the shapes ``a`` and ``b`` are equal as the trace relies on it (see :func:`known`: a size known only
    when the program runs is equal to another only where that holds for every value)."""
    if type(a) is tuple and type(b) is tuple and plain_sizes(a) and plain_sizes(b):
        return a == b
    return len(a) == len(b) and all(known(x == y) for x, y in zip(a, b))


def may_broadcast(size, target) -> bool:
    """Whether a dimension of ``size`` may be broadcast to ``target`` (equal, or 1), as the trace relies on it: a
    size known only when the program runs is not asked (the result has size ``target`` either way; the run
    raises where it is neither, as eager)."""
    if type(size) is int and type(target) is int:
        return size == target or size == 1
    return known(size == target) or known(size == 1) or is_data_dependent(size) or is_data_dependent(target)


def is_symbolic(x) -> bool:
    """Whether ``x`` is a size the trace left free (a SymInt not specialised on its value)."""
    if type(x) is not SymInt:
        return False
    node = x.node
    return not node.shape_env.replace(node.expr).is_number


# what a data-dependent size (unknown while tracing) counts as where a number is needed without a guard: the
# stand-in tensors' sizes and the shadows' (never the trace's own computations, which stay symbolic)
DATA_DEPENDENT_PLACEHOLDER = 64


def hint(x) -> int:
    """The value a size had in the call that was traced (a placeholder for a data-dependent size)."""
    if type(x) is SymInt:
        h = x.node.hint
        if h is None:
            return DATA_DEPENDENT_PLACEHOLDER
        return int(h)
    return x


def hints(shape) -> tuple[int, ...]:
    if type(shape) is tuple and plain_sizes(shape):
        return shape
    return tuple(hint(s) for s in shape)


def has_symbolic(shape) -> bool:
    return any(type(s) is SymInt for s in shape)


def size_proxies(x) -> list[SizeProxy]:
    """The trace variables a symbolic size is computed from."""
    env = size_env_of(x)
    if env is None:
        return []
    out = []
    for symbol in sorted(x.node.expr.free_symbols, key=str):
        p = env.proxies.get(symbol)
        if p is not None:
            out.append(p)
    return out


_envs_by_shape_env: dict[int, SizeEnv] = {}


def size_env_of(x: SymInt) -> SizeEnv | None:
    """The environment a symbolic size belongs to (after tracing too, for the transforms)."""
    return _envs_by_shape_env.get(id(x.node.shape_env))


def register(env: SizeEnv) -> None:
    """Makes ``env`` findable from its SymInts after tracing (for the transforms that print them)."""
    import weakref

    key = id(env.shape_env)
    _envs_by_shape_env[key] = env
    weakref.finalize(env.shape_env, _envs_by_shape_env.pop, key, None)


def _printer(env: SizeEnv, local_name=lambda p: p.name):
    from torch.utils._sympy.printers import PythonPrinter

    names = {sym: local_name(p) for sym, p in env.proxies.items()}

    class SizePrinter(PythonPrinter):
        def _print_Symbol(self, expr) -> str:
            name = names.get(expr)
            if name is None:
                raise RuntimeError(f"internal error: the size symbol {expr} has no trace variable")
            return name

    return SizePrinter()


def print_size(x) -> str:
    """``x`` as a Python expression of the trace's size variables."""
    env = size_env_of(x)
    if env is None:
        raise RuntimeError(f"internal error: the symbolic size {x} belongs to no trace")
    expr = x.node.expr
    if expr.is_number:  # (a size expression that simplified to a constant)
        return repr(float(expr)) if type(x) is torch.SymFloat else str(int(expr))
    cached = env._printer
    if cached is None or cached[1] != len(env.proxies):  # (data-dependent sizes add symbols while tracing)
        cached = env._printer = (_printer(env), len(env.proxies))
    text = cached[0].doprint(expr)
    return text if expr.is_Symbol else f"({text})"
