"""A STAND-IN for nvFuser's ``nvfuser_direct`` module, for tests without nvFuser or a GPU.

This is not nvFuser. :class:`RecordingFusionDefinitionStandIn` follows
``nvfuser_direct.FusionDefinition`` (``with FusionDefinition() as fd:``, ``fd.define_tensor``,
``fd.define_scalar``, ``fd.ops.<op>``, ``fd.add_output``, ``fd.execute(inputs, device=...)``) and

- records every call (``.calls``), so tests can check the sequence of nvFuser calls a region
  lowers to;
- rejects names and keyword arguments nvFuser's bindings do not have: op names, their
  ``py::arg`` names, ``define_tensor``/``define_scalar`` keywords and ``DataType`` members are
  read from ``data/nvfuser_direct_api.json`` (extracted from nvFuser's sources by
  ``tools/nvfuser_direct_api.py``), so a misspelt op or keyword fails here and not first on a GPU;
- evaluates the recorded definition with PyTorch on the CPU in ``execute``, so tests can check
  that the lowering means what the prims mean (against eager PyTorch).

It says nothing about what nvFuser's compiler does: that needs the GPU tests.
"""

from __future__ import annotations

import json
import types
from pathlib import Path

import torch
import torch.nn.functional as F

API_FILE = Path(__file__).parent / "data" / "nvfuser_direct_api.json"
API = json.loads(API_FILE.read_text())
"""nvfuser_direct's bound names: ``module``, ``functions`` (with keyword names), ``FusionDefinition``
(methods with parameters), ``ops`` (with keyword names), ``DataType`` (members)."""

NVFUSER_OP_NAMES = frozenset(API["ops"])
"""The ops nvfuser_direct binds (``nvfuser_direct.ops`` / ``fd.ops``)."""

_TORCH_DTYPES = {
    "Bool": torch.bool,
    "Int32": torch.int32,
    "Int": torch.int64,
    "BFloat16": torch.bfloat16,
    "Half": torch.float16,
    "Float": torch.float32,
    "Double": torch.float64,
    "ComplexFloat": torch.complex64,
    "ComplexDouble": torch.complex128,
    "Float8_e4m3fn": torch.float8_e4m3fn,
    "Float8_e5m2": torch.float8_e5m2,
}


class _DataTypeMember:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


DataTypeStandIn = types.SimpleNamespace(**{n: _DataTypeMember(n) for n in API["DataType"]})
"""Stand-in for ``nvfuser_direct.DataType`` (exactly the members nvFuser binds)."""


def _check_keywords(what: str, kwargs: dict, allowed) -> None:
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise TypeError(f"nvfuser_direct's {what} has no keyword argument {unknown} (it has {sorted(allowed)})")


class StandInValue:
    """A value in a stand-in definition (what ``fd.define_tensor`` / ``fd.ops.add`` return)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_NO_VALUE = object()


def _show(x):
    if isinstance(x, (list, tuple)):
        return type(x)(_show(i) for i in x)
    if isinstance(x, StandInValue):
        return x.name
    if isinstance(x, _DataTypeMember):
        return repr(x)
    return x


class _Ops:
    def __init__(self, fd: RecordingFusionDefinitionStandIn):
        self._fd = fd

    def __getattr__(self, name: str):
        if name not in NVFUSER_OP_NAMES:
            raise AttributeError(f"nvfuser_direct.ops has no op {name!r} (stand-in check)")

        def op(*args, **kwargs):
            _check_keywords(f"ops.{name}", kwargs, API["ops"][name])
            return self._fd._record(f"ops.{name}", args, kwargs, "T")

        return op


class RecordingFusionDefinitionStandIn:
    """A recording, PyTorch-evaluating stand-in for ``nvfuser_direct.FusionDefinition`` (see the module docstring)."""

    def __init__(self):
        self.calls: list[tuple] = []  # (method, args, kwargs) with values shown by name
        self._raw: list[tuple] = []  # (method, args, kwargs, result)
        self.inputs: list[StandInValue] = []
        self.outputs: list[StandInValue] = []
        self.ops = _Ops(self)
        self._n = 0
        self.executions = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def _record(self, method: str, args, kwargs, prefix: str) -> StandInValue:
        out = StandInValue(f"{prefix}{self._n}")
        self._n += 1
        self.calls.append((method, _show(args), {k: _show(v) for k, v in kwargs.items()}))
        self._raw.append((method, args, kwargs, out))
        return out

    def define_tensor(self, **kwargs) -> StandInValue:
        # nvfuser_direct binds three overloads: (shape, contiguity: list, dtype, is_cpu, stride_order),
        # (shape, contiguity: bool, ...) and (sizes, strides, dtype, static_sizes, is_cpu); the lowering
        # passes keywords only, for the first one
        _check_keywords("define_tensor", kwargs, API["functions"]["define_tensor"])
        if "shape" not in kwargs or "contiguity" not in kwargs:
            raise TypeError("define_tensor: the stand-in takes the (shape, contiguity, ...) overload")
        out = self._record("define_tensor", (), kwargs, "T")
        self.inputs.append(out)
        return out

    def define_scalar(self, value=_NO_VALUE, **kwargs) -> StandInValue:
        # (dtype) defines a symbolic input; (value, dtype=None) a constant
        _check_keywords("define_scalar", kwargs, API["functions"]["define_scalar"])
        if "value" in kwargs:
            value = kwargs.pop("value")
        if value is _NO_VALUE or value is None:
            out = self._record("define_scalar", (), kwargs, "S")
            self.inputs.append(out)
        else:
            out = self._record("define_scalar", (value,), kwargs, "S")
        return out

    def add_output(self, value: StandInValue) -> None:
        self.calls.append(("add_output", (value.name,), {}))
        self.outputs.append(value)

    def op_names(self) -> list[str]:
        """The ``ops.*`` calls in order, e.g. ``["ops.cast", "ops.add"]``."""
        return [c[0] for c in self.calls if c[0].startswith("ops.")]

    # -- evaluation with PyTorch (CPU) -----------------------------------------------------------

    def execute(self, inputs, *, device=None, **options):
        _check_keywords("FusionDefinition.execute", {"device": device, **options}, API["FusionDefinition"]["execute"])
        if device is not None and not isinstance(device, (int, str, torch.device)):
            raise TypeError(f"execute(device=...) takes an int, str or torch.device, got {type(device).__name__}")
        self.executions += 1
        env: dict[str, object] = {}
        if len(inputs) != len(self.inputs):
            raise ValueError(f"the definition has {len(self.inputs)} inputs, got {len(inputs)}")
        for v, x in zip(self.inputs, inputs):
            env[v.name] = x
        for method, args, kwargs, out in self._raw:
            if out.name in env:
                continue
            if method == "define_scalar":
                env[out.name] = args[0]
                continue
            name = method.removeprefix("ops.")
            ev = lambda a: env[a.name] if isinstance(a, StandInValue) else a  # noqa: E731
            args = [[ev(i) for i in a] if isinstance(a, list) else ev(a) for a in args]
            kwargs = {k: ev(v) for k, v in kwargs.items()}
            env[out.name] = _evaluate(name, args, kwargs)
        return [env[o.name] for o in self.outputs]


def _tdtype(d: _DataTypeMember) -> torch.dtype:
    return _TORCH_DTYPES[d.name]


def _binary_scalar(fn):
    def run(a, b):
        if not isinstance(a, torch.Tensor):
            a = torch.tensor(a, dtype=b.dtype)
        return fn(a, b)

    return run


def _div(a, b):
    ints = all(not (isinstance(x, torch.Tensor) and x.is_floating_point()) and not isinstance(x, float) for x in (a, b))
    if ints:
        return torch.div(a, b, rounding_mode="trunc")
    return torch.true_divide(a, b)


def _broadcast_in_dim(a, shape, broadcast_dims):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape)


def _slice(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    return a[tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))]


def _reduction(fn):
    def run(a, dims, keepdim=False, dtype=None):
        out = a.to(_tdtype(dtype)) if dtype is not None else a
        for d in sorted(dims, reverse=True):
            out = fn(out, d, keepdim)
        return out

    return run


_SPECIAL = {
    "set": lambda a: a.clone(),
    "div": _div,
    "cast": lambda a, dtype: a.to(_tdtype(dtype)),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda a, new_shape: a.reshape(new_shape),
    "permute": lambda a, dims: a.permute(dims),
    "slice": _slice,
    "squeeze": lambda a, dims: a.squeeze(tuple(dims)) if dims else a,
    "cat": lambda tensors, dim=0: torch.cat(tensors, dim),
    "pad": lambda a, pad_widths, value=None: F.pad(a, pad_widths, value=0 if value is None else value),
    "index_select": lambda a, index, dim: torch.index_select(a, dim, index),
    "take_along_axis": lambda a, index, dim: torch.take_along_dim(a, index, dim),
    "sum": _reduction(lambda t, d, k: torch.sum(t, d, keepdim=k)),
    "prod": _reduction(lambda t, d, k: torch.prod(t, d, keepdim=k)),
    "max": _reduction(lambda t, d, k: torch.amax(t, d, keepdim=k)),
    "min": _reduction(lambda t, d, k: torch.amin(t, d, keepdim=k)),
    "var": lambda a, dims, correction, keepdim=False: torch.var(a, dims, correction=correction, keepdim=keepdim),
    "full": lambda shape, fill_value, dtype: torch.full(shape, fill_value, dtype=_tdtype(dtype)),
    "iota": lambda length, start, step, dtype: torch.arange(length, dtype=_tdtype(dtype)) * step + start,
    "uniform": lambda lo, hi, shape, dtype: torch.empty(shape, dtype=_tdtype(dtype)).uniform_(lo, hi),
    "normal": lambda mean, std, shape, dtype: torch.randn(shape, dtype=_tdtype(dtype)) * std + mean,
    "linear": lambda a, w, bias=None: F.linear(a, w, bias),
    "where": lambda p, a, b: torch.where(p, a, b),
}


def _evaluate(name: str, args, kwargs):
    fn = _SPECIAL.get(name)
    if fn is not None:
        return fn(*args, **kwargs)
    fn = getattr(torch, name)
    if len(args) == 2:
        return _binary_scalar(fn)(*args)
    return fn(*args, **kwargs)


def fake_nvfuser_module() -> types.SimpleNamespace:
    """A stand-in for the ``nvfuser_direct`` module: ``FusionDefinition``, ``DataType``, ``ops``,
    ``compute_tensor_descriptor``, ``__version__`` (only names nvfuser_direct has)."""

    def compute_tensor_descriptor(sizes, strides):
        return [None if s == 1 else True for s in sizes], list(range(len(sizes) - 1, -1, -1))

    attrs = dict(
        FusionDefinition=RecordingFusionDefinitionStandIn,
        DataType=DataTypeStandIn,
        compute_tensor_descriptor=compute_tensor_descriptor,
        __version__="0.2.36+git7e04d26",
    )
    missing = sorted(set(attrs) - set(API["module"]))
    assert not missing, f"the stand-in module has names nvfuser_direct lacks: {missing}"
    return types.SimpleNamespace(**attrs)
