"""Tensors whose value is known while tracing: 0-d tensors computed from Python numbers and sizes only.

Hugging Face's Longformer computes ``n = torch.div(seq_len, w, rounding_mode="trunc")`` (a 0-d tensor, as
in eager) and then uses ``n`` where Python needs a number: ``x.view(b, n, w, d)``, ``int(n)``. Such a value
depends on no tensor's data, only on numbers the trace already specialises on (sizes, constants), so the
tracer computes it with PyTorch on those numbers and answers ``int()``, ``float()``, ``bool()``,
``.item()``, ``.tolist()`` and indexing with it, where a value read from a tensor's data is refused (the
program would need it before it runs). A value computed from a symbolic size specialises that size when it
is read as a Python number (the prologue then checks it, as for any size the trace read).
"""

from __future__ import annotations

import functools

import torch

from thunder.core.dtypes import message_name
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_map
from thunder.core.symbol import Symbol
from thunder.core.symbolic import hint, specialize
from thunder.tracing.tracing_tensor import TracingTensor

__all__ = [
    "KnownValues",
    "VALUE_READS",
    "value_candidates",
    "INDEX_TENSOR_ARGUMENTS",
    "InputIndexValues",
    "check_index_tensor",
]

T = torch.Tensor

# what reads a tensor's value as Python numbers: answered for a known value, refused for any other tensor
VALUE_READS = frozenset({T.__bool__, T.item, T.tolist, T.__int__, T.__float__, T.__index__, T.__complex__})

# torch callables that read a tensor argument as Python numbers (eager calls ``.item()``/``.tolist()`` on it):
# the argument's position, its keyword name, and the eager checks on it
INDEX_TENSOR_ARGUMENTS = {
    torch.narrow: (2, "start"),
    T.narrow: (2, "start"),
    torch.tensor_split: (1, "tensor_indices_or_sections"),
    T.tensor_split: (1, "tensor_indices_or_sections"),
}
# an input tensor with more elements than this is not read as numbers (the prologue compares its value each call)
_MAX_INDEX_VALUES = 64

# torch functions that make a tensor from the numbers they are given (their values are known)
_FROM_NUMBERS = frozenset(
    {torch.tensor, torch.as_tensor, torch.asarray, torch.scalar_tensor, torch.full, torch.zeros, torch.ones}
)
# torch-language modules whose symbols compute values from values, deterministically (arithmetic, casts)
_VALUE_MODULES = frozenset({"thunder.torch.elementwise", "thunder.torch.conversion"})


@functools.cache
def value_candidates() -> frozenset:
    """The torch callables whose 0-d results may have values known while tracing: the tensor literals and the
    callables mapped to torch-language arithmetic and casts (not the random ones)."""
    from thunder.torch.registry import torch_to_thunder

    found = set(_FROM_NUMBERS)
    for func, mapped in torch_to_thunder.items():
        target = mapped.meta if type(mapped) is Symbol else mapped
        if getattr(target, "__module__", None) in _VALUE_MODULES and "random" not in getattr(mapped, "tags", ()):
            found.add(func)
    return frozenset(found)


class _NotKnown(Exception):
    """An argument whose value is not known while tracing (a tensor's data)."""


class KnownValues:
    """The 0-d tensors of one trace whose values are known while tracing, with the sizes each depends on."""

    __slots__ = ("_by_proxy", "candidates")

    def __init__(self):
        self.candidates = value_candidates()
        # id(proxy) -> (proxy, its value as a real CPU tensor, the symbolic sizes it was computed from)
        self._by_proxy: dict[int, tuple[TensorProxy, torch.Tensor, tuple]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_proxy)

    def record(self, func, args, kwargs, out) -> None:
        """After ``func(*args, **kwargs)`` returned the stand-in ``out``: keeps its value when it is a 0-d CPU
        tensor computed only from numbers, sizes and known values by arithmetic, a cast or a tensor literal."""
        if type(out) is not TracingTensor or func not in self.candidates:
            return
        proxy = out._thunder_proxy
        if proxy.shape != () or proxy.device.devicetype.name != "CPU":
            return
        sizes: list = []
        try:
            real_args, real_kwargs = tree_map(lambda x: self._real_leaf(x, sizes), (args, kwargs))
        except _NotKnown:
            return
        try:
            with torch._C.DisableTorchFunction():
                value = func(*real_args, **real_kwargs)
        except Exception:  # (PyTorch refuses the call on real values: then the value is not known)
            return
        if type(value) is not torch.Tensor or value.shape != () or value.dtype != proxy.dtype.torch_dtype:
            return
        self._by_proxy[id(proxy)] = (proxy, value, tuple(sizes))

    def _real_leaf(self, x, sizes: list):
        if isinstance(x, TracingTensor):
            known = self._by_proxy.get(id(x._thunder_proxy))
            if known is None:
                raise _NotKnown
            sizes.extend(known[2])
            return known[1]
        if isinstance(x, torch.Tensor):
            raise _NotKnown  # (a tensor from outside the inputs: its data may change between calls)
        if type(x) is torch.SymInt:
            sizes.append(x)
            return hint(x)
        return x

    def value(self, x) -> torch.Tensor | None:
        """The value of the stand-in ``x`` as a real tensor, or None when it is not known while tracing.

        The symbolic sizes it was computed from become numbers of the trace (guarded)."""
        if not isinstance(x, TracingTensor):
            return None
        known = self._by_proxy.get(id(x._thunder_proxy))
        if known is None:
            return None
        specialize(list(known[2]))
        return known[1]

    def as_numbers(self, tree):
        """``tree`` with each known 0-d stand-in replaced by its value as a Python number (None: none in it)."""
        found = []

        def leaf(x):
            real = self.value(x)
            if real is None:
                return x
            found.append(x)
            return real.item()

        replaced = tree_map(leaf, tree)
        return replaced if found else None


def check_index_tensor(func, dtype: torch.dtype, ndim: int) -> None:
    """Eager's checks on the dtype and rank of the tensor ``func`` (a key of ``INDEX_TENSOR_ARGUMENTS``) reads as
    numbers."""
    if func in (torch.narrow, T.narrow):
        if ndim != 0 or dtype.is_floating_point or dtype.is_complex or dtype is torch.bool:
            raise RuntimeError("start must be an 0-dim integral Tensor.")
        return
    if dtype != torch.int64:
        name = message_name(dtype)
        raise RuntimeError(f"tensor_split expected tensor_indices_or_sections to have dtype of long, but got {name}")
    if ndim > 1:
        raise RuntimeError(
            "tensor_split expected tensor_indices_or_sections to be a zero-dimensional or one-dimensional tensor, "
            f"but got a tensor with {ndim} dims"
        )


class InputIndexValues:
    """Small integer CPU tensors passed to the program, read as numbers where an operation reads them so
    (``torch.narrow(x, 0, start, n)`` with a tensor ``start``, ``x.tensor_split(indices)``).

    The trace specialises on the value, as it does on a Python number argument, and the prologue compares the
    tensor's value on every call: another value misses the cache and traces again (never a stale program).
    A tensor the program updated before the read is not an input's value any more and is not read.
    """

    __slots__ = ("_by_name", "_prologue", "_guarded")

    def __init__(self, prologue, tensors) -> None:
        """``tensors``: the program's tensor arguments (``.expr``, ``.proxy``, ``.example``, ``.is_module_state``)."""
        self._prologue = prologue
        self._by_name = {
            t.proxy.name: (t.expr, t.example)
            for t in tensors
            if t.example is not None
            and not t.is_module_state
            and t.example.device.type == "cpu"
            and not t.example.is_floating_point()
            and not t.example.is_complex()
            and t.example.numel() <= _MAX_INDEX_VALUES
        }
        self._guarded: set[str] = set()

    def value(self, x) -> torch.Tensor | None:
        """The value of the argument stand-in ``x`` (guarded from now on), or None when ``x`` is not such an input."""
        if not isinstance(x, TracingTensor):
            return None
        entry = self._by_name.get(x._thunder_proxy.name)
        if entry is None:
            return None
        expr, example = entry
        value = example.detach().clone()
        if expr not in self._guarded:
            self._guarded.add(expr)
            pb = self._prologue
            tensor_type = pb.constant(torch.Tensor, "_type")
            pb.fail_if(
                f"not isinstance({expr}, {tensor_type}) or {expr}.tolist() != {value.tolist()!r}",
                f"the value of {expr} (read as numbers)",
            )
        return value
