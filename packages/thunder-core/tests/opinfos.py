"""OpInfos: per operator, sample inputs, error inputs and a PyTorch reference.

``test_ops.py`` runs every OpInfo for every executor x dtype x device, comparing ``thunder.jit(op)``
with the reference. To add an operator: write (or reuse) a sample-input generator
``gen(op, device, dtype, requires_grad) -> Iterator[SampleInput]`` covering scalars, 0-d, empty,
non-contiguous and broadcasting inputs, optionally an error-input generator yielding
``(SampleInput, exception type, message regex)`` with the exact exception PyTorch raises, and
append an ``OpInfo`` to ``opinfos``.

``supports_grad`` marks ops whose gradient a grad test can compare with PyTorch autograd
(``torch_reference`` is a plain torch callable, so ``torch.autograd`` differentiates it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch.testing import make_tensor

T = torch.Tensor

FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
INT_DTYPES = (torch.int64, torch.int32)
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool,)
FLOAT_INT = FLOAT_DTYPES + INT_DTYPES
# dtypes the test matrix runs (one integer dtype keeps the suite fast)
TESTED_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.bool)


@dataclass
class SampleInput:
    args: tuple
    kwargs: dict = field(default_factory=dict)

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def __repr__(self) -> str:
        def short(x):
            if isinstance(x, torch.Tensor):
                return f"Tensor{list(x.shape)}{'' if x.is_contiguous() else '(nc)'}"
            if isinstance(x, (tuple, list)):
                return type(x)(short(y) for y in x)
            return x

        return f"SampleInput(args={short(self.args)}, kwargs={self.kwargs})"


@dataclass
class OpInfo:
    """An operator under test.

    ``op`` is the torch callable user code calls (what ``thunder.jit`` traces); ``torch_reference``
    (default: ``op``) computes the expected result eagerly. ``skips`` maps a dtype to a reason the
    combination is not run (PyTorch itself does not implement it).
    """

    name: str
    op: Callable
    sample_input_generator: Callable[..., Iterator[SampleInput]]
    dtypes: Sequence[torch.dtype] = FLOAT_DTYPES
    torch_reference: Callable | None = None
    error_input_generator: Callable[..., Iterator] | None = None
    domain: tuple[float | None, float | None] = (None, None)
    supports_grad: bool = True
    atol: float | None = None
    rtol: float | None = None
    low_precision_tol: tuple[float, float] = (1e-2, 1.6e-2)
    skips: dict = field(default_factory=dict)
    random: bool = False  # compare with eager under the same seed
    decomposes: bool = True  # has a prims decomposition (checked by the "prims" executor)

    def __post_init__(self):
        if self.torch_reference is None:
            self.torch_reference = self.op

    def sample_inputs(self, device, dtype, requires_grad: bool = False) -> Iterator[SampleInput]:
        return self.sample_input_generator(self, device, dtype, requires_grad)

    def error_inputs(self, device) -> Iterator:
        if self.error_input_generator is None:
            return iter(())
        return self.error_input_generator(self, device)

    def tolerances(self, dtype) -> dict:
        if dtype in (torch.bfloat16, torch.float16):
            atol, rtol = self.low_precision_tol
            return {"atol": atol, "rtol": rtol}
        if self.atol is not None:
            return {"atol": self.atol, "rtol": self.rtol if self.rtol is not None else self.atol}
        return {}


def _make(op: OpInfo, device, dtype, requires_grad=False, **kw):
    low, high = op.domain
    kw.setdefault("low", low)
    kw.setdefault("high", high)
    if dtype is torch.bool:
        kw.pop("low"), kw.pop("high")
    rg = requires_grad and dtype.is_floating_point
    return partial(make_tensor, device=device, dtype=dtype, requires_grad=rg, **kw)


# ---------------------------------------------------------------- generic generators


def elementwise_unary_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    for shape in ((), (0,), (5,), (3, 0, 2), (2, 3, 4)):
        yield SampleInput(make(shape))
    yield SampleInput(make((4, 6), noncontiguous=True))
    yield SampleInput(make((5, 3)).mT)


def elementwise_binary_generator(op, device, dtype, requires_grad, *, scalars=True):
    make = _make(op, device, dtype, requires_grad)
    for sa, sb in (((), ()), ((0,), (0,)), ((5,), (5,)), ((2, 3), (2, 3)), ((4, 1), (1, 3)), ((2, 3, 4), (4,))):
        yield SampleInput(make(sa), make(sb))
    yield SampleInput(make((3, 4), noncontiguous=True), make((3, 4)).mT.contiguous().mT)
    yield SampleInput(make((2, 3)), make(()))  # a 0-d tensor with a higher-dim one
    if scalars:
        if dtype is torch.bool:
            yield SampleInput(make((2, 3)), True)
        elif dtype.is_floating_point:
            yield SampleInput(make((2, 3)), 2.5)
            yield SampleInput(make((3,)), 3)
        else:
            yield SampleInput(make((2, 3)), 3)


def elementwise_binary_error_generator(op, device):
    a = torch.ones(2, 3, device=device, dtype=op.dtypes[0])
    b = torch.ones(4, device=device, dtype=op.dtypes[0])
    yield (
        SampleInput(a, b),
        RuntimeError,
        r"The size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 1",
    )


def reduction_generator(op, device, dtype, requires_grad, *, allow_empty_full=True):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, 4)))
    if allow_empty_full:
        yield SampleInput(make(()))
    yield SampleInput(make((2, 3, 4)), 1)
    yield SampleInput(make((2, 3, 4)), -1, keepdim=True)
    yield SampleInput(make((2, 3, 4)), (0, 2))
    yield SampleInput(make((4, 5), noncontiguous=True), 0)
    yield SampleInput(make((3, 0)), 0)
    yield SampleInput(make(()), 0)


def reduction_error_generator(op, device):
    yield (
        SampleInput(torch.ones(2, 3, device=device), 2),
        IndexError,
        r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)",
    )


# ---------------------------------------------------------------- the catalogue

opinfos: list[OpInfo] = []


def add(*infos: OpInfo) -> None:
    opinfos.extend(infos)


def unary(name, fn=None, dtypes=FLOAT_DTYPES, domain=(None, None), **kw):
    fn = fn if fn is not None else getattr(torch, name)
    add(OpInfo(name, fn, elementwise_unary_generator, dtypes=dtypes, domain=domain, **kw))


for _n in "exp expm1 sin cos tan atan sinh cosh tanh asinh sigmoid erf erfc".split():
    unary(_n)
unary("exp2")
unary("abs", dtypes=FLOAT_INT)
unary("neg", dtypes=FLOAT_INT)
unary("sign", dtypes=FLOAT_INT)
for _n in "log log1p log2 log10 sqrt rsqrt".split():
    unary(_n, domain=(0.1, 10))
unary("reciprocal", domain=(0.5, 4))
unary("lgamma", domain=(0.1, 10))
unary("digamma", domain=(0.5, 10), dtypes=(torch.float32, torch.float64))
unary("asin", domain=(-0.9, 0.9))
unary("acos", domain=(-0.9, 0.9))
unary("atanh", domain=(-0.9, 0.9))
unary("erfinv", domain=(-0.9, 0.9), dtypes=(torch.float32, torch.float64))
unary("acosh", domain=(1.1, 10))
for _n in "floor ceil trunc round frac".split():
    unary(_n)
for _n in "isfinite isnan isinf signbit".split():
    unary(_n, dtypes=FLOAT_DTYPES + (torch.int64,), supports_grad=False)
unary("bitwise_not", dtypes=(torch.int64, torch.int32, torch.bool), supports_grad=False)
unary("logical_not", dtypes=ALL_DTYPES, supports_grad=False)
unary("square", dtypes=FLOAT_INT)
unary("nan_to_num", lambda a: torch.nan_to_num(a, nan=0.5, posinf=3.0), dtypes=FLOAT_DTYPES)
unary("Tensor.float", T.float, dtypes=ALL_DTYPES, supports_grad=False)
unary("Tensor.half", T.half, dtypes=ALL_DTYPES, supports_grad=False)
unary("Tensor.bfloat16", T.bfloat16, dtypes=ALL_DTYPES, supports_grad=False)
unary("Tensor.long", T.long, dtypes=FLOAT_DTYPES + (torch.int32, torch.bool), supports_grad=False)
unary("Tensor.to_dtype", lambda a: a.to(torch.float64), dtypes=ALL_DTYPES)
unary("clone", dtypes=ALL_DTYPES)
unary("Tensor.contiguous", T.contiguous, dtypes=ALL_DTYPES)

# activations
for _n in "relu relu6 silu gelu softplus leaky_relu elu hardsigmoid hardswish mish logsigmoid tanhshrink selu celu softsign hardtanh hardshrink softshrink".split():
    unary(f"F.{_n}", getattr(F, _n))
unary("F.gelu_tanh", lambda a: F.gelu(a, approximate="tanh"))
unary("F.leaky_relu_slope", lambda a: F.leaky_relu(a, 0.2))
unary("F.relu_int", F.relu, dtypes=(torch.int64,), supports_grad=False)
unary("clamp", lambda a: torch.clamp(a, -0.5, 0.5), dtypes=FLOAT_INT)
unary("clamp_min", lambda a: torch.clamp_min(a, 0.1), dtypes=FLOAT_INT)


def _binary(name, fn=None, dtypes=FLOAT_DTYPES, scalars=True, gen=None, **kw):
    fn = fn if fn is not None else getattr(torch, name)
    g = gen or partial(elementwise_binary_generator, scalars=scalars)
    add(OpInfo(name, fn, g, dtypes=dtypes, error_input_generator=elementwise_binary_error_generator, **kw))


for _n in ("add", "sub", "mul"):
    _binary(_n, dtypes=FLOAT_INT)
_binary("add_alpha", lambda a, b: torch.add(a, b, alpha=2), dtypes=FLOAT_INT)
_binary("true_divide", torch.true_divide, dtypes=FLOAT_INT, domain=(1, 5))
_binary("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), dtypes=FLOAT_INT, domain=(1, 5))
_binary("div_trunc", lambda a, b: torch.div(a, b, rounding_mode="trunc"), dtypes=FLOAT_INT, domain=(1, 5))
_binary("remainder", dtypes=FLOAT_INT, domain=(1, 5))
_binary("fmod", dtypes=FLOAT_INT, domain=(1, 5))
_binary("pow", dtypes=(torch.float32, torch.float64), domain=(0.5, 2))
_binary("atan2", scalars=False)
_binary("maximum", dtypes=FLOAT_INT, scalars=False)
_binary("minimum", dtypes=FLOAT_INT, scalars=False)
_binary("copysign", scalars=False)
for _n in ("eq", "ne", "lt", "le", "gt", "ge"):
    _binary(_n, dtypes=FLOAT_INT + (torch.bool,), supports_grad=False)
for _n in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    _binary(_n, dtypes=(torch.int64, torch.int32, torch.bool), supports_grad=False)
for _n in ("logical_and", "logical_or", "logical_xor"):
    _binary(_n, dtypes=ALL_DTYPES, scalars=False, supports_grad=False)
_binary("Tensor.__radd__", lambda a, b: 2 + a + b, dtypes=FLOAT_INT)
_binary("Tensor.__rsub__", lambda a, b: 2 - a - b, dtypes=FLOAT_INT)
_binary("Tensor.__rtruediv__", lambda a, b: 2 / (a + b), dtypes=(torch.float32, torch.float64), domain=(1, 3))
_binary("Tensor.__pow__scalar", lambda a, b: a**2 + b**0.5, dtypes=(torch.float32, torch.float64), domain=(0.5, 2))
_binary("lerp", lambda a, b: torch.lerp(a, b, 0.3), scalars=False)
_binary("xlogy", dtypes=(torch.float32, torch.float64), domain=(0.1, 3))


def ternary_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    for sa, sb, sc in (((), (), ()), ((4,), (4,), (4,)), ((2, 3), (1, 3), (2, 1)), ((0, 3), (0, 3), (3,))):
        yield SampleInput(make(sa), make(sb), make(sc))


add(
    OpInfo("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), ternary_generator),
    OpInfo("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), ternary_generator, domain=(1, 3)),
)


def where_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    mask = partial(make_tensor, device=device, dtype=torch.bool)
    yield SampleInput(mask((3, 4)), make((3, 4)), make((3, 4)))
    yield SampleInput(mask((3, 1)), make((1, 4)), make(()))
    yield SampleInput(mask(()), make((0,)), make((0,)))
    yield SampleInput(mask((2, 3)), make((2, 3)), 0.0 if dtype.is_floating_point else 0)


def masked_fill_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    mask = partial(make_tensor, device=device, dtype=torch.bool)
    v = 1.5 if dtype.is_floating_point else 2
    yield SampleInput(make((3, 4)), mask((3, 4)), v)
    yield SampleInput(make((3, 4)), mask((4,)), v)
    yield SampleInput(make(()), mask(()), v)
    yield SampleInput(make((2, 3)), mask((2, 3)), make(()))


def masked_fill_error_generator(op, device):
    yield (
        SampleInput(torch.ones(2, device=device), torch.ones(2, device=device), 1.0),
        RuntimeError,
        "masked_fill_ only supports boolean masks, but got mask with dtype float",
    )


add(
    OpInfo("where", torch.where, where_generator, dtypes=ALL_DTYPES),
    OpInfo(
        "masked_fill",
        torch.masked_fill,
        masked_fill_generator,
        dtypes=ALL_DTYPES[:-1],
        error_input_generator=masked_fill_error_generator,
    ),
)

# ---------------------------------------------------------------- reductions


def _red(name, fn=None, dtypes=FLOAT_DTYPES, gen=reduction_generator, **kw):
    fn = fn if fn is not None else getattr(torch, name)
    add(OpInfo(name, fn, gen, dtypes=dtypes, error_input_generator=reduction_error_generator, **kw))


_red("sum", dtypes=FLOAT_INT + (torch.bool,))
_red("mean")
_red(
    "prod",
    dtypes=FLOAT_INT,
    domain=(0.5, 1.5),
    gen=lambda op, d, t, r: (
        s for s in reduction_generator(op, d, t, r) if not (len(s.args) > 1 and isinstance(s.args[1], tuple))
    ),
)
_red("amax", dtypes=FLOAT_INT, gen=partial(reduction_generator, allow_empty_full=False))
_red("amin", dtypes=FLOAT_INT, gen=partial(reduction_generator, allow_empty_full=False))
_red("var", atol=1e-5)
_red("std", atol=1e-5)
_red("var_mean", atol=1e-5)
_red("std_mean", atol=1e-5)
_red("logsumexp", gen=lambda op, d, t, r: (s for s in reduction_generator(op, d, t, r) if len(s.args) > 1))
_red(
    "any",
    dtypes=ALL_DTYPES,
    gen=lambda op, d, t, r: (
        s for s in reduction_generator(op, d, t, r) if not isinstance(s.args[-1] if len(s.args) > 1 else 0, tuple)
    ),
    supports_grad=False,
)
_red(
    "all",
    dtypes=ALL_DTYPES,
    gen=lambda op, d, t, r: (
        s for s in reduction_generator(op, d, t, r) if not isinstance(s.args[-1] if len(s.args) > 1 else 0, tuple)
    ),
    supports_grad=False,
)
_red("var_correction", lambda a, *args, **kw: torch.var(a, *args, correction=0, **kw), atol=1e-5)


def dim_reduction_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, 4)), 1)
    yield SampleInput(make((2, 3, 4)), -1, keepdim=True)
    yield SampleInput(make((5,)), 0)
    yield SampleInput(make((4, 5), noncontiguous=True), 0)


def _distinct(op, device, dtype, requires_grad, shape):
    # distinct values make argmax/sort/topk deterministic
    n = math.prod(shape)
    t = torch.randperm(n, device=device).reshape(shape).to(dtype)
    return t.requires_grad_(requires_grad and dtype.is_floating_point)


def distinct_dim_generator(op, device, dtype, requires_grad):
    mk = partial(_distinct, op, device, dtype, requires_grad)
    yield SampleInput(mk((2, 3, 4)), 1)
    yield SampleInput(mk((2, 3, 4)), -1, keepdim=True)
    yield SampleInput(mk((7,)), 0)
    yield SampleInput(mk((5, 4)).mT, 0)


def argmax_generator(op, device, dtype, requires_grad):
    yield from distinct_dim_generator(op, device, dtype, requires_grad)
    yield SampleInput(_distinct(op, device, dtype, False, (3, 4)))


_red("argmax", dtypes=(torch.float32, torch.float64, torch.int64), gen=argmax_generator, supports_grad=False)
_red("argmin", dtypes=(torch.float32, torch.float64, torch.int64), gen=argmax_generator, supports_grad=False)
_red(
    "max_dim",
    lambda a, *args, **kw: torch.max(a, *args, **kw),
    dtypes=(torch.float32, torch.int64),
    gen=distinct_dim_generator,
)
_red(
    "min_dim",
    lambda a, *args, **kw: torch.min(a, *args, **kw),
    dtypes=(torch.float32, torch.int64),
    gen=distinct_dim_generator,
)
unary("max", lambda a: torch.max(a.reshape(-1)[:3] if a.numel() else torch.ones(1, dtype=a.dtype)), dtypes=FLOAT_INT)
_red(
    "cumsum",
    dtypes=FLOAT_INT,
    gen=lambda op, d, t, r: (SampleInput(*s.args) for s in dim_reduction_generator(op, d, t, r)),
    atol=1e-5,
)


def topk_generator(op, device, dtype, requires_grad):
    mk = partial(_distinct, op, device, dtype, requires_grad)
    yield SampleInput(mk((3, 6)), 2)
    yield SampleInput(mk((3, 6)), 2, 0, largest=False)
    yield SampleInput(mk((5,)), 0)


def sort_generator(op, device, dtype, requires_grad):
    mk = partial(_distinct, op, device, dtype, requires_grad)
    yield SampleInput(mk((3, 6)))
    yield SampleInput(mk((3, 6)), 0, descending=True)
    yield SampleInput(mk((0,)))


def topk_error_generator(op, device):
    yield SampleInput(torch.ones(3, device=device), 4), RuntimeError, "selected index k out of range"


add(
    OpInfo(
        "topk",
        torch.topk,
        topk_generator,
        dtypes=(torch.float32, torch.int64),
        error_input_generator=topk_error_generator,
    ),
    OpInfo("sort", torch.sort, sort_generator, dtypes=(torch.float32, torch.int64)),
)

# ---------------------------------------------------------------- shape ops


def _shape_op(name, fn, samples, dtypes=ALL_DTYPES, errors=None, **kw):
    def gen(op, device, dtype, requires_grad):
        make = _make(op, device, dtype, requires_grad)
        for shape, *rest in samples:
            if isinstance(shape, tuple) and shape and shape[0] == "nc":
                yield SampleInput(make(shape[1], noncontiguous=True), *rest)
            else:
                yield SampleInput(make(shape), *rest)

    def egen(op, device):
        for shape, args, exc, msg in errors or ():
            yield SampleInput(torch.ones(shape, device=device), *args), exc, msg

    add(OpInfo(name, fn, gen, dtypes=dtypes, error_input_generator=egen if errors else None, **kw))


_shape_op(
    "reshape",
    torch.reshape,
    [((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((), (1, 1)), ((0, 3), (3, 0)), (("nc", (3, 4)), (4, 3))],
    errors=[((2, 3), ((4, 2),), RuntimeError, r"shape '\[4, 2\]' is invalid for input of size 6")],
)
_shape_op("Tensor.view", lambda a, *s: a.view(*s), [((2, 3, 4), 6, 4), ((2, 3), -1), ((), 1)])
_shape_op("permute", torch.permute, [((2, 3, 4), (2, 0, 1)), ((2, 3), (-1, 0)), ((), ())])
_shape_op(
    "transpose",
    torch.transpose,
    [((2, 3, 4), 0, 2), ((2, 3), -1, -2), ((0, 3), 0, 1)],
    errors=[
        ((2, 3), (0, 2), IndexError, r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)")
    ],
)
_shape_op("t", torch.t, [((2, 3),), ((3,),), ((),)])
_shape_op("Tensor.mT", lambda a: a.mT, [((2, 3, 4),), ((2, 3),)])
_shape_op("Tensor.T", lambda a: a.T, [((2, 3),)])
_shape_op("squeeze", torch.squeeze, [((2, 1, 3, 1),), ((2, 1, 3), 1), ((2, 1, 3), 0), ((1, 1, 2), (0, 1)), ((),)])
_shape_op("unsqueeze", torch.unsqueeze, [((2, 3), 0), ((2, 3), -1), ((), 0)])
_shape_op("flatten", torch.flatten, [((2, 3, 4),), ((2, 3, 4), 1), ((),), ((2, 3, 4), 0, 1)])
_shape_op("unflatten", torch.unflatten, [((2, 12), 1, (3, 4)), ((6,), 0, (-1, 2))])
_shape_op("Tensor.expand", lambda a, *s: a.expand(*s), [((3, 1), 3, 4), ((1,), 2, 3, -1), ((), 2)])
_shape_op("broadcast_to", torch.broadcast_to, [((3, 1), (2, 3, 4))])
_shape_op("Tensor.repeat", lambda a, *s: a.repeat(*s), [((2, 3), 2, 1), ((3,), 2, 2), ((), 3)])
_shape_op("repeat_interleave", torch.repeat_interleave, [((2, 3), 2, 1), ((3,), 2)])
_shape_op("flip", torch.flip, [((2, 3, 4), (0, 2)), ((3,), (0,)), ((2, 3), (-1,))])
_shape_op("roll", torch.roll, [((2, 5), 2, 1), ((2, 5), -1), ((3, 4), (1, 2), (0, 1))])
_shape_op("tril", torch.tril, [((3, 4),), ((2, 4, 3), 1), ((4, 4), -1)], dtypes=FLOAT_INT + (torch.bool,))
_shape_op("triu", torch.triu, [((3, 4),), ((2, 4, 3), 1), ((4, 4), -1)], dtypes=FLOAT_INT + (torch.bool,))
_shape_op("movedim", torch.movedim, [((2, 3, 4), 0, -1), ((2, 3, 4), (0, 1), (2, 0))])
_shape_op("diagonal", torch.diagonal, [((3, 4),), ((3, 4), 1), ((3, 4), -2), ((2, 3, 4), 0, 1, 2), ((2, 2), 5)])
_shape_op("narrow", torch.narrow, [((4, 5), 1, 1, 3), ((4, 5), 0, -2, 2)])
_shape_op(
    "unfold",
    T.unfold,
    [((8,), 0, 3, 2), ((3, 7), 1, 2, 2), ((), 0, 1, 1), ((0,), 0, 0, 1), ((4, 5), -1, 5, 1)],
    errors=[
        ((), (0, 2, 1), RuntimeError, "maximum size for tensor at dimension 0 is 1 but size is 2"),
        ((0,), (0, 0, -1), RuntimeError, "step is -1 but must be > 0"),
        ((8,), (1, 2, 1), IndexError, r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 1\)"),
        ((8,), (0, -5, 1), RuntimeError, "size is -5 but must be >= 0"),
        ((8,), (0, 10, 1), RuntimeError, "maximum size for tensor at dimension 0 is 8 but size is 10"),
    ],
)
_shape_op("split", torch.split, [((5, 4), 2), ((5, 4), [1, 3], 1), ((0, 2), 1)])
_shape_op("chunk", torch.chunk, [((5, 4), 2), ((6, 4), 3, 0), ((5, 4), 3, -1)])
_shape_op("tensor_split", torch.tensor_split, [((7, 4), 3), ((7, 4), [1, 5]), ((5, 4), 2, 1)])
_shape_op("unbind", torch.unbind, [((3, 4),), ((3, 4), 1)])
_shape_op("getitem_basic", lambda a: a[1:, None, ..., ::2], [((3, 4, 5),)])
_shape_op("getitem_int", lambda a: a[-1, 0], [((3, 4, 5),)])
_shape_op("getitem_empty", lambda a: a[2:2], [((3, 4),)])


def getitem_index_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((5, 3)), torch.tensor([0, 4, -1], device=device))
    yield SampleInput(make((5, 3)), torch.tensor([[0, 1], [2, 2]], device=device))


add(OpInfo("getitem_tensor", lambda a, i: a[i], getitem_index_generator, dtypes=ALL_DTYPES))


def cat_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput([make((2, 3)), make((4, 3))])
    yield SampleInput([make((2, 3)), make((2, 1)), make((2, 0))], 1)
    yield SampleInput([make((2, 3)), make((0,))])
    yield SampleInput([make((3,))], -1)


def cat_error_generator(op, device):
    yield (
        SampleInput([torch.ones(2, 3, device=device), torch.ones(2, 4, device=device)]),
        RuntimeError,
        "Sizes of tensors must match except in dimension 0. Expected size 3 but got size 4 for tensor number 1 in the list.",
    )
    yield SampleInput([]), ValueError, "expected a non-empty list of Tensors"


def stack_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput([make((2, 3)), make((2, 3))])
    yield SampleInput([make(()), make(())], 0)
    yield SampleInput([make((2, 3)), make((2, 3)), make((2, 3))], -1)


add(
    OpInfo("cat", torch.cat, cat_generator, dtypes=ALL_DTYPES, error_input_generator=cat_error_generator),
    OpInfo("stack", torch.stack, stack_generator, dtypes=ALL_DTYPES),
)


def pad_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3)), (1, 2))
    yield SampleInput(make((2, 3, 4)), (1, 0, 0, 2), value=1.0 if dtype.is_floating_point else 1)
    yield SampleInput(make((2, 3)), (-1, 1))


add(OpInfo("F.pad", F.pad, pad_generator, dtypes=FLOAT_INT))

# ---------------------------------------------------------------- indexing


def _index(device, n, shape):
    return make_tensor(shape, device=device, dtype=torch.int64, low=0, high=n)


def gather_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), 1, _index(device, 5, (4, 3)))
    yield SampleInput(make((4, 5)), 0, _index(device, 4, (2, 5)))
    yield SampleInput(make((4, 5)), -1, _index(device, 5, (4, 0)))


def gather_error_generator(op, device):
    yield (
        SampleInput(torch.ones(3, 4, device=device), 0, torch.zeros(3, dtype=torch.int64, device=device)),
        RuntimeError,
        "Index tensor must have the same number of dimensions as input tensor",
    )


def index_select_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), 0, _index(device, 4, (3,)))
    yield SampleInput(make((4, 5)), -1, _index(device, 5, (6,)))
    yield SampleInput(make((4, 5)), 1, _index(device, 5, (0,)))


def take_along_dim_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), _index(device, 5, (4, 2)), 1)
    yield SampleInput(make((4, 5)), _index(device, 4, (1, 5)), 0)


def scatter_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    # a permutation per row: no two sources write one element
    idx = torch.stack([torch.randperm(5, device=device)[:3] for _ in range(4)])
    yield SampleInput(make((4, 5)), 1, idx, make((4, 3)))
    yield SampleInput(make((4, 5)), 1, idx, 2.0 if dtype.is_floating_point else 2)


def scatter_add_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), 1, _index(device, 5, (4, 3)), make((4, 3)))
    yield SampleInput(make((4, 5)), 0, _index(device, 4, (6, 5)), make((6, 5)))


def index_add_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), 0, _index(device, 4, (3,)), make((3, 5)))
    yield SampleInput(make((4, 5)), 1, _index(device, 5, (2,)), make((4, 2)), alpha=2)


def index_copy_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), 0, torch.tensor([2, 0], device=device), make((2, 5)))
    yield SampleInput(make((4, 5)), -1, torch.tensor([4, 1, 3], device=device), make((4, 3)))


add(
    OpInfo("gather", torch.gather, gather_generator, dtypes=FLOAT_INT, error_input_generator=gather_error_generator),
    OpInfo("index_select", torch.index_select, index_select_generator, dtypes=ALL_DTYPES),
    OpInfo("take_along_dim", torch.take_along_dim, take_along_dim_generator, dtypes=FLOAT_INT),
    OpInfo("scatter", torch.scatter, scatter_generator, dtypes=FLOAT_INT),
    OpInfo(
        "scatter_add",
        torch.scatter_add,
        scatter_add_generator,
        dtypes=(torch.float32, torch.float64, torch.int64),
        atol=1e-5,
    ),
    OpInfo(
        "index_add", torch.index_add, index_add_generator, dtypes=(torch.float32, torch.float64, torch.int64), atol=1e-5
    ),
    OpInfo("index_copy", torch.index_copy, index_copy_generator, dtypes=FLOAT_INT),
    OpInfo(
        "index_fill",
        lambda a, dim, idx, v: torch.index_fill(a, dim, idx, v),
        lambda op, d, t, r: (
            SampleInput(s.args[0], s.args[1], s.args[2], 3) for s in index_copy_generator(op, d, t, r)
        ),
        dtypes=FLOAT_INT,
    ),
)

# ---------------------------------------------------------------- linear algebra


def matmul_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad, low=-2, high=2)
    for sa, sb in (
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3, 4)),
        ((5, 2, 3), (3, 4)),
        ((5, 2, 3), (1, 3, 4)),
        ((0, 3), (3, 2)),
    ):
        yield SampleInput(make(sa), make(sb))
    yield SampleInput(make((4, 3)).mT, make((4, 2)))


def matmul_error_generator(op, device):
    yield (
        SampleInput(torch.ones(2, 3, device=device), torch.ones(4, 2, device=device)),
        RuntimeError,
        r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x2\)",
    )


def linear_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad, low=-2, high=2)
    yield SampleInput(make((2, 3)), make((4, 3)), make((4,)))
    yield SampleInput(make((5, 2, 3)), make((4, 3)))
    yield SampleInput(make((3,)), make((4, 3)), make((4,)))
    yield SampleInput(make((0, 3)), make((2, 3)))


MM_DTYPES = (torch.float32, torch.float64, torch.bfloat16)
add(
    OpInfo(
        "matmul",
        torch.matmul,
        matmul_generator,
        dtypes=MM_DTYPES,
        error_input_generator=matmul_error_generator,
        atol=1e-5,
    ),
    OpInfo("F.linear", F.linear, linear_generator, dtypes=MM_DTYPES, atol=1e-5),
    OpInfo(
        "mm",
        torch.mm,
        lambda op, d, t, r: (s for s in matmul_generator(op, d, t, r) if s.args[0].ndim == s.args[1].ndim == 2),
        dtypes=MM_DTYPES,
        atol=1e-5,
    ),
    OpInfo(
        "bmm",
        torch.bmm,
        lambda op, d, t, r: iter([SampleInput(_make(op, d, t, r)((2, 3, 4)), _make(op, d, t, r)((2, 4, 5)))]),
        dtypes=MM_DTYPES,
        atol=1e-5,
    ),
    OpInfo(
        "outer",
        torch.outer,
        lambda op, d, t, r: iter([SampleInput(_make(op, d, t, r)((3,)), _make(op, d, t, r)((4,)))]),
        dtypes=MM_DTYPES,
    ),
    OpInfo(
        "addmm",
        lambda a, b, c: torch.addmm(a, b, c, beta=0.5, alpha=2),
        lambda op, d, t, r: iter(
            [SampleInput(_make(op, d, t, r)((3,)), _make(op, d, t, r)((2, 4)), _make(op, d, t, r)((4, 3)))]
        ),
        dtypes=MM_DTYPES,
        atol=1e-5,
    ),
    OpInfo(
        "baddbmm",
        torch.baddbmm,
        lambda op, d, t, r: iter(
            [SampleInput(_make(op, d, t, r)((2, 3, 5)), _make(op, d, t, r)((2, 3, 4)), _make(op, d, t, r)((2, 4, 5)))]
        ),
        dtypes=MM_DTYPES,
        atol=1e-5,
    ),
)


def einsum_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad, low=-2, high=2)
    yield SampleInput("ij,jk->ik", make((2, 3)), make((3, 4)))
    yield SampleInput("bij,bjk", make((2, 2, 3)), make((2, 3, 4)))
    yield SampleInput("i,j->ij", make((3,)), make((4,)))
    yield SampleInput("...ij->...ji", make((2, 3, 4)))
    yield SampleInput("bhqd,bhkd->bhqk", make((1, 2, 3, 4)), make((1, 2, 5, 4)))
    yield SampleInput("ij->", make((3, 4)))


add(OpInfo("einsum", torch.einsum, einsum_generator, dtypes=(torch.float32, torch.float64), atol=1e-5))

# ---------------------------------------------------------------- nn


def softmax_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((3, 5)), -1)
    yield SampleInput(make((2, 3, 4)), 1)
    yield SampleInput(make(()), 0)
    yield SampleInput(make((0, 3)), 1)
    yield SampleInput(make((3, 4), noncontiguous=True), 0)
    if dtype is torch.float32:
        yield SampleInput(make((3, 4)), 1, dtype=torch.float64)


def norm_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, 4)), (4,), make((4,)), make((4,)))
    yield SampleInput(make((2, 3, 4)), (3, 4))
    yield SampleInput(make((5,)), (5,), make((5,)), None, 1e-3)


def rms_norm_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, 4)), (4,), make((4,)))
    yield SampleInput(make((2, 3, 4)), (3, 4), None, 1e-5)


def layer_norm_error_generator(op, device):
    yield (
        SampleInput(torch.ones(2, 3, device=device), (4,)),
        RuntimeError,
        r"Given normalized_shape=\[4\], expected input with shape \[\*, 4\], but got input of size\[2, 3\]",
    )


def group_norm_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 6, 4)), 3, make((6,)), make((6,)))
    yield SampleInput(make((2, 4, 3, 3)), 2)


def batch_norm_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    pos = partial(make_tensor, device=device, dtype=dtype, low=0.5, high=2)
    yield SampleInput(make((4, 3, 5)), make((3,)), pos((3,)), make((3,)), make((3,)), False)
    yield SampleInput(make((4, 3)), make((3,)), pos((3,)), None, None, True, 0.2)
    yield SampleInput(make((4, 3, 2, 2)), None, None, make((3,)), None, True)


def embedding_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(_index(device, 10, (2, 3)), make((10, 4)))
    yield SampleInput(_index(device, 10, (5,)), make((10, 4)), 2)
    yield SampleInput(_index(device, 10, ()), make((10, 4)))


def sdpa_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, 5, 4)), make((2, 3, 6, 4)), make((2, 3, 6, 4)))
    yield SampleInput(make((2, 3, 5, 4)), make((2, 3, 5, 4)), make((2, 3, 5, 4)), is_causal=True)
    yield SampleInput(
        make((2, 3, 5, 4)), make((2, 3, 6, 4)), make((2, 3, 6, 4)), make_tensor((5, 6), device=device, dtype=torch.bool)
    )
    yield SampleInput(make((1, 2, 5, 4)), make((1, 2, 6, 4)), make((1, 2, 6, 4)), make((5, 6)), scale=0.3)
    yield SampleInput(make((1, 4, 5, 4)), make((1, 2, 5, 4)), make((1, 2, 5, 4)), is_causal=True, enable_gqa=True)


def cross_entropy_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), _index(device, 5, (4,)))
    yield SampleInput(make((4, 5, 3)), _index(device, 5, (4, 3)), reduction="sum")
    yield SampleInput(make((4, 5)), torch.tensor([0, -100, 4, -100], device=device), reduction="none")
    yield SampleInput(make((4, 5)), torch.tensor([1, 2, 7, 3], device=device), ignore_index=7, label_smoothing=0.1)
    yield SampleInput(make((5,)), torch.tensor(2, device=device))


def nll_generator(op, device, dtype, requires_grad):
    for s in cross_entropy_generator(op, device, dtype, requires_grad):
        s.kwargs.pop("label_smoothing", None)
        yield s


def loss_generator(op, device, dtype, requires_grad, low=None, high=None):
    make = _make(op, device, dtype, requires_grad, low=low, high=high)
    yield SampleInput(make((3, 4)), make((3, 4)))
    yield SampleInput(make((3, 4)), make((3, 4)), reduction="sum")
    yield SampleInput(make((3, 4)), make((3, 4)), reduction="none")
    yield SampleInput(make(()), make(()))


def loss_error_generator(op, device):
    yield (
        SampleInput(torch.ones(2, device=device), torch.ones(2, device=device), reduction="bad"),
        ValueError,
        "bad is not a valid value for reduction",
    )


def conv_generator(op, device, dtype, requires_grad, n=2):
    make = _make(op, device, dtype, requires_grad, low=-1, high=1)
    sp = (5,) * n
    k = (3,) * n
    yield SampleInput(make((2, 3, *sp)), make((4, 3, *k)), make((4,)))
    yield SampleInput(make((2, 4, *sp)), make((4, 2, *k)), None, 2, 1, 1, 2)
    yield SampleInput(make((1, 3, *sp)), make((2, 3, *k)), None, padding="same", dilation=2)
    yield SampleInput(make((3, *sp)), make((2, 3, *k)))


def conv_error_generator(op, device):
    yield (
        SampleInput(torch.ones(1, 4, 5, 5, device=device), torch.ones(2, 3, 3, 3, device=device)),
        RuntimeError,
        r"Given groups=1, weight of size \[2, 3, 3, 3\], expected input\[1, 4, 5, 5\] to have 3 channels, but got 4 channels instead",
    )


def pool_generator(op, device, dtype, requires_grad, n=2):
    make = _make(op, device, dtype, requires_grad)
    sp = (7,) * n
    yield SampleInput(make((2, 3, *sp)), 2)
    yield SampleInput(make((2, 3, *sp)), 3, 2, 1)
    yield SampleInput(make((3, *sp)), 3, 2, ceil_mode=True)


def adaptive_pool_generator(op, device, dtype, requires_grad, n=2):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, *((8,) * n))), 4)
    yield SampleInput(make((2, 3, *((7,) * n))), 3)
    yield SampleInput(make((2, 3, *((5,) * n))), 1)


def interpolate_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3, 4, 5)), scale_factor=2)
    yield SampleInput(make((2, 3, 4, 5)), size=(3, 7))
    yield SampleInput(make((2, 3, 4, 5)), size=(6, 9), mode="bilinear")
    yield SampleInput(make((2, 3, 4, 5)), size=(6, 9), mode="bilinear", align_corners=True)
    yield SampleInput(make((2, 3, 6)), size=10, mode="linear")


def dropout_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((4, 5)), 0.3)
    yield SampleInput(make((4, 5)), 0.5, False)
    yield SampleInput(make((0, 5)), 0.5)


def one_hot_generator(op, device, dtype, requires_grad):
    yield SampleInput(_index(device, 5, (3, 2)), 5)
    yield SampleInput(_index(device, 5, ()), 6)


def cosine_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((3, 4)), make((3, 4)))
    yield SampleInput(make((3, 4)), make((1, 4)), dim=-1)


def normalize_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((3, 4)))
    yield SampleInput(make((3, 4, 2)), dim=-1)


def _gen_with(gen, **extra):
    return partial(gen, **extra)


LOSS_DTYPES = (torch.float32, torch.float64)
add(
    OpInfo("softmax", torch.softmax, softmax_generator),
    OpInfo("log_softmax", torch.log_softmax, softmax_generator),
    OpInfo("F.layer_norm", F.layer_norm, norm_generator, error_input_generator=layer_norm_error_generator, atol=1e-5),
    OpInfo("F.rms_norm", F.rms_norm, rms_norm_generator, atol=1e-5),
    OpInfo("F.group_norm", F.group_norm, group_norm_generator, atol=1e-5),
    OpInfo("F.batch_norm", F.batch_norm, batch_norm_generator, dtypes=(torch.float32, torch.float64), atol=1e-5),
    OpInfo("F.embedding", F.embedding, embedding_generator, dtypes=FLOAT_DTYPES),
    OpInfo(
        "F.scaled_dot_product_attention",
        F.scaled_dot_product_attention,
        sdpa_generator,
        dtypes=(torch.float32, torch.float64, torch.bfloat16),
        atol=1e-5,
        low_precision_tol=(3e-2, 5e-2),
    ),
    OpInfo(
        "F.cross_entropy",
        F.cross_entropy,
        cross_entropy_generator,
        dtypes=LOSS_DTYPES,
        error_input_generator=loss_error_generator,
        atol=1e-5,
    ),
    OpInfo("F.nll_loss", F.nll_loss, nll_generator, dtypes=LOSS_DTYPES),
    OpInfo("F.mse_loss", F.mse_loss, loss_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo("F.l1_loss", F.l1_loss, loss_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo("F.smooth_l1_loss", F.smooth_l1_loss, loss_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo("F.huber_loss", F.huber_loss, loss_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo(
        "F.binary_cross_entropy",
        F.binary_cross_entropy,
        _gen_with(loss_generator, low=0.05, high=0.95),
        dtypes=LOSS_DTYPES,
        atol=1e-5,
    ),
    OpInfo(
        "F.binary_cross_entropy_with_logits",
        F.binary_cross_entropy_with_logits,
        _gen_with(loss_generator, low=0.0, high=1.0),
        dtypes=LOSS_DTYPES,
        atol=1e-5,
    ),
    OpInfo("F.conv1d", F.conv1d, _gen_with(conv_generator, n=1), dtypes=LOSS_DTYPES, atol=1e-4),
    OpInfo(
        "F.conv2d", F.conv2d, conv_generator, dtypes=LOSS_DTYPES, error_input_generator=conv_error_generator, atol=1e-4
    ),
    OpInfo("F.max_pool1d", F.max_pool1d, _gen_with(pool_generator, n=1), dtypes=LOSS_DTYPES),
    OpInfo("F.max_pool2d", F.max_pool2d, pool_generator, dtypes=LOSS_DTYPES),
    OpInfo("F.avg_pool1d", F.avg_pool1d, _gen_with(pool_generator, n=1), dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo("F.avg_pool2d", F.avg_pool2d, pool_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo(
        "F.adaptive_avg_pool1d",
        F.adaptive_avg_pool1d,
        _gen_with(adaptive_pool_generator, n=1),
        dtypes=LOSS_DTYPES,
        atol=1e-5,
    ),
    OpInfo("F.adaptive_avg_pool2d", F.adaptive_avg_pool2d, adaptive_pool_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo("F.adaptive_max_pool2d", F.adaptive_max_pool2d, adaptive_pool_generator, dtypes=LOSS_DTYPES),
    OpInfo("F.interpolate", F.interpolate, interpolate_generator, dtypes=LOSS_DTYPES, atol=1e-5),
    OpInfo("F.normalize", F.normalize, normalize_generator, atol=1e-5),
    OpInfo("F.cosine_similarity", F.cosine_similarity, cosine_generator, atol=1e-5),
    OpInfo("F.one_hot", F.one_hot, one_hot_generator, dtypes=(torch.int64,), supports_grad=False),
    OpInfo("F.dropout", F.dropout, dropout_generator, random=True),
    OpInfo(
        "F.glu",
        F.glu,
        lambda op, d, t, r: iter([SampleInput(_make(op, d, t, r)((3, 4))), SampleInput(_make(op, d, t, r)((4, 2)), 0)]),
    ),
    OpInfo(
        "F.kl_div",
        F.kl_div,
        lambda op, d, t, r: (
            SampleInput(s.args[0].log(), *s.args[1:], **s.kwargs)
            for s in loss_generator(op, d, t, r, low=0.1, high=1.0)
        ),
        dtypes=LOSS_DTYPES,
        atol=1e-5,
    ),
)

# ---------------------------------------------------------------- factories and random ops


def no_input_generator(op, device, dtype, requires_grad):
    yield SampleInput(device, dtype)


def _factory(name, fn, dtypes=ALL_DTYPES, random=False):
    add(OpInfo(name, fn, no_input_generator, dtypes=dtypes, supports_grad=False, random=random))


_factory("zeros", lambda device, dtype: torch.zeros(2, 3, device=device, dtype=dtype))
_factory("ones", lambda device, dtype: torch.ones((0, 3), device=device, dtype=dtype))
_factory("full", lambda device, dtype: torch.full((2, 2), 1, device=device, dtype=dtype))
_factory("empty_shape", lambda device, dtype: list(torch.empty(3, 2, device=device, dtype=dtype).shape))
_factory("arange", lambda device, dtype: torch.arange(1, 7, 2, device=device, dtype=dtype), dtypes=FLOAT_INT)
_factory(
    "linspace",
    lambda device, dtype: torch.linspace(-1, 2, 7, device=device, dtype=dtype),
    dtypes=(torch.float32, torch.float64),
)
_factory("eye", lambda device, dtype: torch.eye(3, 4, device=device, dtype=dtype))
_factory("tensor", lambda device, dtype: torch.tensor([[1, 2], [3, 0]], device=device, dtype=dtype))
_factory("rand", lambda device, dtype: torch.rand(3, 4, device=device, dtype=dtype), dtypes=FLOAT_DTYPES, random=True)
_factory("randn", lambda device, dtype: torch.randn(3, 4, device=device, dtype=dtype), dtypes=FLOAT_DTYPES, random=True)
_factory(
    "randint",
    lambda device, dtype: torch.randint(2, 9, (3, 4), device=device, dtype=dtype),
    dtypes=FLOAT_INT,
    random=True,
)


def like_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3)))
    yield SampleInput(make(()))


for _name, _fn in (
    ("zeros_like", torch.zeros_like),
    ("ones_like", torch.ones_like),
    ("full_like", lambda a: torch.full_like(a, 2)),
    ("new_zeros", lambda a: a.new_zeros(3, 1)),
    ("new_ones", lambda a: a.new_ones((2,), dtype=torch.float64)),
    ("new_full", lambda a: a.new_full((2,), 3)),
):
    add(OpInfo(_name, _fn, like_generator, dtypes=ALL_DTYPES, supports_grad=False))
add(
    OpInfo("rand_like", torch.rand_like, like_generator, random=True, supports_grad=False),
    OpInfo("randn_like", torch.randn_like, like_generator, random=True, supports_grad=False),
    OpInfo(
        "bernoulli",
        torch.bernoulli,
        lambda op, d, t, r: iter([SampleInput(make_tensor((4, 5), device=d, dtype=t, low=0, high=1))]),
        random=True,
        supports_grad=False,
    ),
    OpInfo(
        "multinomial",
        torch.multinomial,
        lambda op, d, t, r: iter(
            [
                SampleInput(make_tensor((3, 5), device=d, dtype=t, low=0.1, high=1), 2),
                SampleInput(make_tensor((5,), device=d, dtype=t, low=0.1, high=1), 7, True),
            ]
        ),
        dtypes=(torch.float32, torch.float64),
        random=True,
        supports_grad=False,
    ),
    OpInfo(
        "uniform_",
        lambda a: a.clone().uniform_(-2, 3),
        like_generator,
        random=True,
        supports_grad=False,
    ),
    OpInfo(
        "normal_",
        lambda a: a.clone().normal_(1.0, 2.0),
        like_generator,
        random=True,
        supports_grad=False,
        dtypes=(torch.float32, torch.float64),
    ),
)


# ---------------------------------------------------------------- in-place ops (functionalised; the input updates too)


def _inplace(name, method, gen, dtypes=FLOAT_DTYPES, **kw):
    def fn(a, *args, **kwargs):
        r = getattr(a, method)(*args, **kwargs)
        return r, a

    add(OpInfo(name, fn, gen, dtypes=dtypes, supports_grad=False, **kw))


def _self_shaped(gen):
    # an in-place op cannot broadcast its first argument
    def g(op, device, dtype, requires_grad):
        for s in gen(op, device, dtype, requires_grad):
            b = s.args[1]
            if not isinstance(b, torch.Tensor) or torch.broadcast_shapes(s.args[0].shape, b.shape) == s.args[0].shape:
                yield s

    return g


_inplace("Tensor.add_", "add_", _self_shaped(elementwise_binary_generator), dtypes=FLOAT_INT)
_inplace("Tensor.mul_", "mul_", _self_shaped(elementwise_binary_generator), dtypes=FLOAT_INT)
_inplace("Tensor.relu_", "relu_", elementwise_unary_generator)
_inplace("Tensor.sqrt_", "sqrt_", elementwise_unary_generator, domain=(0.1, 4))
_inplace("Tensor.zero_", "zero_", elementwise_unary_generator, dtypes=ALL_DTYPES)
_inplace("Tensor.masked_fill_", "masked_fill_", masked_fill_generator, dtypes=FLOAT_INT)
_inplace("Tensor.index_copy_", "index_copy_", index_copy_generator, dtypes=FLOAT_INT)
_inplace(
    "Tensor.clamp_",
    "clamp_",
    lambda op, d, t, r: (SampleInput(s.args[0], -0.5, 0.5) for s in elementwise_unary_generator(op, d, t, r)),
)
_inplace("Tensor.addcmul_", "addcmul_", ternary_generator)
_inplace(
    "Tensor.lerp_",
    "lerp_",
    lambda op, d, t, r: (
        SampleInput(*s.args, 0.25)
        for s in elementwise_binary_generator(op, d, t, r, scalars=False)
        if s.args[0].shape == torch.broadcast_shapes(s.args[0].shape, s.args[1].shape)
    ),
)


def copy_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    yield SampleInput(make((2, 3)), make((3,)))
    yield SampleInput(make((2, 3)), make((2, 3), dtype=torch.float64))
    yield SampleInput(make(()), make(()))


_inplace("Tensor.copy_", "copy_", copy_generator, dtypes=FLOAT_DTYPES)


def setitem_generator(op, device, dtype, requires_grad):
    make = _make(op, device, dtype, requires_grad)
    v = 2 if not dtype.is_floating_point else 2.5
    yield SampleInput(make((4, 5)), (slice(1, 3), 0), v)
    yield SampleInput(make((4, 5)), (Ellipsis, slice(None, None, 2)), make((3,)))
    yield SampleInput(make((4, 5)), 1, make((5,)))
    yield SampleInput(make((4, 5)), torch.tensor([0, 3], device=device), make((2, 5)))
    yield SampleInput(make((4, 5)), make_tensor((4, 5), device=device, dtype=torch.bool), v)


def _setitem(a, key, value):
    a[key] = value
    return a


add(OpInfo("Tensor.__setitem__", _setitem, setitem_generator, dtypes=FLOAT_INT, supports_grad=False))


def by_name() -> dict[str, OpInfo]:
    return {op.name: op for op in opinfos}


_ = Any
