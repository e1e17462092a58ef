"""Statement templates drawn from PyTorch's OpInfo database (``op_db``), not from a hand list.

Each template is one op_db operation applied to one of its own sample inputs, printed as Python source: the
function (``torch.cos({a})``), method (``{a}.cos()``), in-place (``{a}.cos_()``) and ``out=`` forms
(``torch.cos({a}, out={new})``). ``{a}`` is the sample's input, replaced by a tensor of the program when one has
its shape and dtype and by a literal tensor plus a program tensor's mean otherwise (so gradients still reach the
program's inputs). Its other tensor arguments are literals.

Only operations ``test_op_db.py`` passes are drawn: an op with a known failure
(``op_db_known_failures.txt``) for a form is left out of that form, and random ops are left out (their values
cannot be compared). The vocabulary is built once per process from a fixed seed, in op_db's order, so a
hypothesis seed draws the same programs on every run.
"""

from __future__ import annotations

import functools
import math
import random
import re
import warnings
from dataclasses import dataclass

import torch

_DTYPE = torch.float64
_SAMPLES_PER_OP = 3
_MAX_LITERAL_NUMEL = 24  # a sample whose tensors hold more elements is left out (programs stay readable)
_RANDOM = re.compile(
    r"(rand|dropout|normal|bernoulli|multinomial|uniform|exponential|geometric|cauchy|log_normal|rrelu|"
    r"fractional_max_pool|empty|multi_head_attention_forward|new_empty|item|jiterator)"
)
# namespaces whose functions a template calls by name (``torch.special.erf``, ``F.relu`` ...)
_NAMESPACES = [
    ("torch", torch),
    ("F", torch.nn.functional),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
]


@dataclass(frozen=True)
class Template:
    """One op_db statement: ``source.format(a=<input>, new=<result name>)``; ``input`` is the sample's input."""

    op: str
    form: str  # "function", "method", "inplace" or "out"
    shape: tuple[int, ...]
    literal_input: str  # the sample's input as source (used when no program tensor has its shape)
    source: str


class _Unprintable(Exception):
    """A sample argument with no Python source that rebuilds it (a generator, a device object ...)."""


def _literal(x) -> str:
    if isinstance(x, torch.Tensor):
        if x.layout is not torch.strided or x.is_complex() or x.numel() > _MAX_LITERAL_NUMEL:
            raise _Unprintable
        values = x.detach().tolist()
        text = repr(values).replace("nan", "float('nan')").replace("inf", "float('inf')")
        if x.numel() == 0:  # (an empty tensor's nested list may not keep its shape)
            return f"torch.empty({tuple(x.shape)}, dtype={x.dtype})"
        return f"torch.tensor({text}, dtype={x.dtype})"
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return repr(x)
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else f"float('{x}')"
    if isinstance(x, torch.dtype):
        return str(x)
    if isinstance(x, torch.Size):
        return repr(tuple(x))
    if isinstance(x, (tuple, list)):
        items = [_literal(y) for y in x]
        if isinstance(x, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    raise _Unprintable


def _call_name(fn) -> str | None:
    """``fn`` as a dotted name that evaluates to it in a program's namespace, or None."""
    name = getattr(fn, "__name__", None)
    if not name:
        return None
    for prefix, module in _NAMESPACES:
        if getattr(module, name, None) is fn:
            return f"{prefix}.{name}"
    return None


def _arguments(sample) -> str:
    args = [_literal(a) for a in sample.args]
    args += [f"{k}={_literal(v)}" for k, v in sample.kwargs.items()]
    return ", ".join(args)


def _templates_of(op, known: dict[str, str]) -> list[Template]:
    name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    if _RANDOM.search(op.name) or _DTYPE not in op.supported_dtypes("cpu"):
        return []

    def passes(variant: str) -> bool:
        return all(f"{name} {variant} {kind}" not in known for kind in ("value", "grad"))

    function = _call_name(op.op) if passes("function") else None
    method = op.name if op.method_variant is getattr(torch.Tensor, op.name, object()) and passes("method") else None
    inplace = op.name + "_" if op.inplace_variant is getattr(torch.Tensor, op.name + "_", object()) else None
    inplace = inplace if passes("inplace") else None
    out = function if op.supports_out and function else None
    found = []
    for i, sample in enumerate(op.sample_inputs("cpu", _DTYPE, requires_grad=False)):
        if i >= _SAMPLES_PER_OP:
            break
        if not isinstance(sample.input, torch.Tensor):
            continue
        try:
            literal_input, rest = _literal(sample.input), _arguments(sample)
        except _Unprintable:
            continue
        sep = ", " if rest else ""
        shape = tuple(sample.input.shape)
        result = None
        if out:  # out= is allocated with the result's shape and dtype (thunder refuses to resize it)
            try:
                result = op.op(sample.input.clone(), *sample.args, **sample.kwargs)
            except Exception:  # noqa: BLE001  (eager rejects the sample: no out= form of it)
                result = None
        forms = []
        if function:
            forms.append(("function", f"{{new}} = {function}({{a}}{sep}{rest})"))
        if method:
            forms.append(("method", f"{{new}} = {{a}}.{method}({rest})"))
        if inplace:
            forms.append(("inplace", f"{{a}}.{inplace}({rest})"))
        if isinstance(result, torch.Tensor) and result.layout is torch.strided:
            empty = f"torch.empty({tuple(result.shape)}, dtype={result.dtype})"
            forms.append(("out", f"{{new}} = {empty}; {out}({{a}}{sep}{rest}, out={{new}})"))
        found += [Template(name, form, shape, literal_input, source) for form, source in forms]
    return found


@functools.cache
def vocabulary() -> tuple[Template, ...]:
    """Every template, in op_db's order (built once per process, from a fixed seed)."""
    import op_db_support as support

    known = support.read_known_failures()
    state, python_state = torch.random.get_rng_state(), random.getstate()
    torch.manual_seed(0)
    random.seed(0)  # (some OpInfos draw sample arguments with Python's random module)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            found = []
            for op in support.load_op_db():
                try:
                    found += _templates_of(op, known)
                except Exception:  # noqa: BLE001  (an OpInfo whose samples cannot be built on CPU: not drawn)
                    continue
    finally:
        torch.random.set_rng_state(state)
        random.setstate(python_state)
    return tuple(found)


@functools.cache
def input_shapes() -> tuple[tuple[int, ...], ...]:
    """The sample input shapes of the vocabulary, most common first (inputs drawn in them fit templates)."""
    counts: dict[tuple[int, ...], int] = {}
    for t in vocabulary():
        counts[t.shape] = counts.get(t.shape, 0) + 1
    return tuple(sorted(counts, key=lambda s: (-counts[s], s)))[:6]
