"""Run PyTorch's own OpInfo database (``op_db``) through ``thunder.jit`` and compare with eager.

Shared by ``test_op_db.py`` (CI, known failures as strict xfails) and ``op_db_refresh.py`` (rewrites
the known-failure file). One *case* is ``(op, variant, kind)``:

- ``op``: the OpInfo's full name, ``name`` or ``name.variant_test_name``;
- ``variant``: ``function`` (``op.op``), ``method`` (``Tensor.<name>``) or ``inplace`` (``Tensor.<name>_``);
- ``kind``: ``value`` (float32 outputs, dtypes and mutated inputs against eager; an op with no float32
  support on CPU, such as ``bitwise_and`` or ``bincount``, runs in the first dtype of
  ``FALLBACK_VALUE_DTYPES`` it supports) or ``grad`` (float64 gradients against eager autograd; function
  variant only).

A case runs at most ``samples_per_case()`` sample inputs (``THUNDER_OP_DB_SAMPLES``, default 2), so
CI stays bounded; set it higher locally for a deeper sweep. ``check_case`` raises on a mismatch or a
thunder error and returns normally when thunder agrees with eager on every sample it ran.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

KNOWN_FAILURES_FILE = Path(__file__).with_name("op_db_known_failures.txt")

# Ops whose outputs are random or uninitialised memory: only shapes and dtypes are compared.
_NONDETERMINISTIC = re.compile(
    r"(rand|dropout|normal(?!ize)|bernoulli|multinomial|uniform|exponential|geometric|cauchy|log_normal|"
    r"rrelu|fractional_max_pool|empty|feature_alpha_dropout|alpha_dropout|multi_head_attention_forward)"
)

# the known-failure class of a case with no sample eager accepts: test_op_db.py leaves it out
NO_SAMPLE = "eager-rejects-every-sample"

VALUE_DTYPE = torch.float32
GRAD_DTYPE = torch.float64
# the value dtype of an op that does not support float32 on CPU: the first of these it supports
FALLBACK_VALUE_DTYPES = (
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
    torch.float64,
    torch.complex64,
    torch.float8_e4m3fn,
)


class Mismatch(AssertionError):
    """Thunder ran, but its result differs from eager's; ``kind`` names what differed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


@dataclass(frozen=True)
class Case:
    """One op_db check: an op's variant under ``value`` or ``grad``."""

    op: str
    variant: str
    kind: str

    @property
    def key(self) -> str:
        return f"{self.op} {self.variant} {self.kind}"


def samples_per_case() -> int:
    return int(os.environ.get("THUNDER_OP_DB_SAMPLES", "2"))


def load_op_db() -> list:
    """PyTorch's OpInfo list (importing it needs the ``expecttest`` package)."""
    from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def full_name(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _supports(op, dtype: torch.dtype) -> bool:
    try:
        return dtype in op.supported_dtypes("cpu")
    except Exception:  # some OpInfos only describe CUDA dtypes
        return False


def value_dtype(op) -> torch.dtype | None:
    """The dtype an op's value cases run in: float32, else the first of ``FALLBACK_VALUE_DTYPES`` it supports on
    CPU (None: no CPU dtype at all, e.g. the CUDA-only scaled matmuls)."""
    for dtype in (VALUE_DTYPE, *FALLBACK_VALUE_DTYPES):
        if _supports(op, dtype):
            return dtype
    return None


def cases(op_db: list) -> list[tuple[Case, Any]]:
    """Every case the op_db supports on CPU, paired with its OpInfo."""
    result = []
    for op in op_db:
        name = full_name(op)
        if value_dtype(op) is not None:
            result.append((Case(name, "function", "value"), op))
            if op.method_variant is not None:
                result.append((Case(name, "method", "value"), op))
            if op.inplace_variant is not None:
                result.append((Case(name, "inplace", "value"), op))
        if op.supports_autograd and _supports(op, GRAD_DTYPE) and not _NONDETERMINISTIC.search(op.name):
            result.append((Case(name, "function", "grad"), op))
    return result


def read_known_failures(path: Path = KNOWN_FAILURES_FILE) -> dict[str, str]:
    """``{"op variant kind": failure class}`` from the known-failure file (``#`` starts a comment)."""
    known = {}
    if not path.exists():
        return known
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        op, variant, kind, cls = line.split(maxsplit=3)
        known[f"{op} {variant} {kind}"] = cls
    return known


_CLASSES = [
    # (exception type name or "", text in the message, class)
    ("TracingError", "could not run it on the meta device", "no-symbol-no-meta-kernel"),
    ("NotImplementedError", "changes the shape of a tensor in place", "shape-changing-inplace"),
    ("NotImplementedError", "does not support the torch dtype", "unsupported-dtype"),
    ("TypeError", "unexpected keyword argument", "rejects-pytorch-kwarg-name"),
    ("TypeError", "invalid combination of arguments", "bad-decomposition-call"),
    ("RuntimeError", "cannot be converted to a Python bool", "tensor-value-read-while-tracing"),
    ("RuntimeError", "is not differentiable with respect to argument", "opaque-backward-nondiff-arg"),
    ("DataDependentControlFlowError", "", "data-dependent-item"),
    ("", "no gradient rule", "no-grad-rule"),
]


def failure_class(exc: BaseException) -> str:
    """A short, stable name for why a case failed (the fourth column of the known-failure file)."""
    if isinstance(exc, Mismatch):
        return f"mismatch-{exc.kind}"
    msg = str(exc)
    for type_name, text, cls in _CLASSES:
        if (not type_name or type(exc).__name__ == type_name) and text in msg:
            return cls
    return f"error-{type(exc).__name__}"


# --- pytree helpers -------------------------------------------------------------------------------


def _leaves(x) -> list:
    if isinstance(x, (tuple, list)):
        return [leaf for y in x for leaf in _leaves(y)]
    if isinstance(x, dict):
        return [leaf for k in sorted(x, key=str) for leaf in _leaves(x[k])]
    return [x]


def _clone(x, *, requires_grad: bool | None = None):
    if isinstance(x, torch.Tensor):
        rg = x.requires_grad if requires_grad is None else (requires_grad and x.is_floating_point())
        return x.detach().clone().requires_grad_(rg)
    if isinstance(x, (tuple, list)):
        return type(x)(_clone(y, requires_grad=requires_grad) for y in x)
    if isinstance(x, dict):
        return {k: _clone(v, requires_grad=requires_grad) for k, v in x.items()}
    return x


def _call_variant(op, variant: str) -> Callable:
    if variant == "function":
        fn = op.op
    elif variant == "method":
        fn = op.method_variant
    else:
        fn = op.inplace_variant

    def call(*args, **kwargs):
        return fn(*args, **kwargs)

    return call


def _samples(op, dtype: torch.dtype, requires_grad: bool, checked: list[int]) -> Iterator:
    """Sample inputs until ``samples_per_case()`` of them were compared (``checked[0]``), looking at
    no more than ten times as many (eager rejects some, e.g. in-place ops that would change a dtype)."""
    n = samples_per_case()
    for i, sample in enumerate(op.sample_inputs("cpu", dtype, requires_grad=requires_grad)):
        if checked[0] >= n or i >= 10 * n:
            return
        yield sample


def _compare_leaves(actual, expected, what: str, *, metadata_only: bool, rtol: float, atol: float) -> None:
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    if len(a_leaves) != len(e_leaves):
        raise Mismatch("structure", f"{what}: thunder gave {len(a_leaves)} leaves, eager {len(e_leaves)}")
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise Mismatch("structure", f"{what}[{i}]: thunder gave {type(a).__name__}, eager a tensor")
            if a.dtype != e.dtype:
                raise Mismatch("dtype", f"{what}[{i}]: thunder {a.dtype}, eager {e.dtype}")
            if a.shape != e.shape:
                raise Mismatch("shape", f"{what}[{i}]: thunder {tuple(a.shape)}, eager {tuple(e.shape)}")
            if metadata_only:
                continue
            if e.is_floating_point() and e.itemsize == 1:  # float8: assert_close compares those bit for bit only
                a, e = a.float(), e.float()
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True, check_device=False)
            except AssertionError as err:
                raise Mismatch("value", f"{what}[{i}]: {str(err).splitlines()[0]}") from None
        elif isinstance(e, (int, float, complex, bool)) and not metadata_only:
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
            except (AssertionError, TypeError) as err:
                raise Mismatch("value", f"{what}[{i}]: thunder {a!r}, eager {e!r} ({err})") from None


def check_value(op, variant: str) -> int:
    """Float32 outputs (and inputs updated in place) of ``thunder.jit`` equal eager's (``value_dtype(op)`` for an
    op without float32). Returns the number of samples compared."""
    import thunder

    fn = _call_variant(op, variant)
    jfn = thunder.jit(fn)
    metadata_only = bool(_NONDETERMINISTIC.search(op.name))
    checked = [0]
    for sample in _samples(op, value_dtype(op), requires_grad=False, checked=checked):
        e_args = _clone((sample.input, *sample.args))
        e_kwargs = _clone(sample.kwargs)
        try:
            expected = fn(*e_args, **e_kwargs)
        except Exception:
            continue  # eager rejects this sample (e.g. an in-place op that would change the dtype)
        args = _clone((sample.input, *sample.args))
        kwargs = _clone(sample.kwargs)
        actual = jfn(*args, **kwargs)
        _compare_leaves(actual, expected, "output", metadata_only=metadata_only, rtol=1e-4, atol=1e-5)
        _compare_leaves(
            (args, kwargs), (e_args, e_kwargs), "input after call", metadata_only=metadata_only, rtol=1e-4, atol=1e-5
        )
        checked[0] += 1
    return checked[0]


def check_grad(op) -> int:
    """Float64 gradients of ``thunder.jit`` equal eager autograd's for a random cotangent. Returns the
    number of samples compared."""
    import thunder

    fn = _call_variant(op, "function")
    jfn = thunder.jit(fn)
    checked = [0]
    for sample in _samples(op, GRAD_DTYPE, requires_grad=True, checked=checked):
        e_args, e_kwargs = _clone((sample.input, *sample.args)), _clone(sample.kwargs)
        try:
            expected = fn(*e_args, **e_kwargs)
        except Exception:
            continue
        e_outs = [t for t in _leaves(expected) if isinstance(t, torch.Tensor) and t.requires_grad]
        e_inputs = [t for t in _leaves((e_args, e_kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not e_outs or not e_inputs:
            continue
        args, kwargs = _clone((sample.input, *sample.args)), _clone(sample.kwargs)
        actual = jfn(*args, **kwargs)
        a_outs = [t for t in _leaves(actual) if isinstance(t, torch.Tensor) and t.requires_grad]
        a_inputs = [t for t in _leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
        if len(a_outs) != len(e_outs):
            raise Mismatch("requires_grad", f"thunder gave {len(a_outs)} outputs requiring grad, eager {len(e_outs)}")
        gen = torch.Generator().manual_seed(0)
        cotangents = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in e_outs]
        try:
            e_grads = torch.autograd.grad(e_outs, e_inputs, cotangents, allow_unused=True)
        except Exception:
            continue  # eager cannot differentiate this sample either
        a_grads = torch.autograd.grad(a_outs, a_inputs, cotangents, allow_unused=True)
        for i, (a, e) in enumerate(zip(a_grads, e_grads)):
            if e is None:
                if a is not None and a.numel() and a.abs().max().item() != 0:
                    raise Mismatch("grad", f"input {i}: thunder gave a nonzero gradient, eager none")
                continue
            if a is None:
                if e.numel() and e.abs().max().item() != 0:
                    raise Mismatch("grad", f"input {i}: thunder gave no gradient, eager a nonzero one")
                continue
            try:
                torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-7, equal_nan=True)
            except AssertionError as err:
                raise Mismatch("grad", f"input {i}: {str(err).splitlines()[0]}") from None
        checked[0] += 1
    return checked[0]


def check_case(case: Case, op) -> int:
    """Run one case; raises on a thunder error or a mismatch with eager."""
    torch.manual_seed(0)
    if case.kind == "value":
        return check_value(op, case.variant)
    return check_grad(op)
