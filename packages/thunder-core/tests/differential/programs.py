"""Random straight-line torch programs, drawn by hypothesis, printable as runnable Python.

A ``Program`` is a list of input specs (shape, dtype, requires_grad, values) and a list of source
lines over the names ``a0, a1, ...`` (inputs) and ``v0, v1, ...`` (intermediates). While drawing, each
candidate line is executed eagerly on the values so far; a line eager rejects is dropped, so every
drawn program runs in eager PyTorch, and shapes, dtypes and aliasing are exactly eager's.

Each vocabulary feature (``FEATURES``) is a switch: ``programs(features={...})`` draws only from
the features given.
"""

from __future__ import annotations

import inspect
import random
import re
import warnings
import zlib
from dataclasses import dataclass, field, replace

import numpy as np
import torch
import torch.nn.functional as F
from hypothesis import strategies as st

from differential.functions import FUNCTIONS
from differential.op_db_vocabulary import input_shapes, vocabulary

FEATURES = {
    "elementwise": "unary elementwise ops and scalar arithmetic",
    "broadcast": "binary ops between tensors of broadcastable shapes",
    "mixed_dtype": "int64/bool/float32 inputs beside float64 ones, dtype casts and comparisons",
    "singular_values": "inputs with zeros and ties, and the reductions singular there (prod, norm, std, var, max(dim))",
    "reduction": "sum/mean/amax/logsumexp (prod/norm/std/var/max(dim) with singular_values)",
    "view": "transpose, .mT, unsqueeze, reshape, view, indexing with ints and slices, expand, diagonal, and "
    "resolve_neg/resolve_conj/positive (which return their argument itself)",
    "zero_dim_views": "view ops (and in-place through views) on 0-d tensors too",
    "indexing": "advanced indexing, index_select, gather, masked_fill, cat (legacy empty pieces too) and stack",
    "matmul": "matmul between tensors of matching inner size",
    "softmax": "softmax and log_softmax",
    "inplace": "in-place ops (add_, mul_, sigmoid_, clamp_, index_copy_, index assignment ...) on intermediates",
    "inplace_view": "in-place ops through a view of an intermediate or an input",
    "inplace_input": "in-place ops on the inputs themselves",
    "aliased_inputs": "the same tensor (or a view of it) passed as two arguments",
    "detach": "x.detach() and straight-through estimators",
    "no_grad": "statements inside `with torch.no_grad():` (in-place updates of leaves included)",
    "autograd_function": "custom torch.autograd.Function.apply (their backwards differ from the forward's derivative)",
    "view_inputs": "inputs that are non-leaf tensors or views of a non-leaf base (offsets, steps, transposes, "
    "expands, diagonals); gradients go to the base's leaves, also through the inputs after the call",
    "special_values": "NaN, ±inf, ±0 and ties among float input values, 0-d and empty inputs",
    "low_precision": "float16/bfloat16 inputs beside float64 ones",
    "rounding": "rounding division, floor_divide, remainder, fmod, and in-place ops with a bool result on floats",
    "size_values": "0-d tensors computed from sizes (torch.div(x.shape[-1], 2)) read as Python numbers and used as sizes",
    "numpy": "NumPy on a tensor's values (x.detach().numpy(), np.exp, np.maximum, np.mean) and back (torch.from_numpy)",
    "operator_names": "parameters named like operators the generated code calls (pad, sum, prod, scatter_add, "
    "add, mul, where ...) instead of a0, a1, ...",
    "recompute": 'half the programs compiled with thunder.jit(recompute="reshapes") (elementwise values the '
    "backward reads saved, as eager saves them), the others with the default (recomputed in the backward)",
    "scatter_updates": "in-place scatter_/scatter_add_/scatter_reduce_/index_put_(accumulate=True)/masked_scatter_/"
    "index_add_, clamp/clamp_ with tensor bounds, torch.where with scalars, in-place ops on int tensors, out= into "
    "views of the tensor read",
    "strided_inputs": "rank-4 inputs, and inputs of every dtype but bool made non-contiguous: channels_last, "
    "permuted, stepped and expanded (stride 0) layouts",
    "layout_chains": "chains of elementwise ops on (often non-contiguous) tensors, then a reshape/flatten/"
    "contiguous of the result (a view or a copy as the chain's layout decides in eager), and out= tensors of "
    "another shape (resized)",
    "captured_inputs": "inputs the function reads as globals (as a closure's tensor or another module's parameter) "
    "instead of taking them as arguments",
    "eager_errors": "about one program in four ends with a line eager rejects (a view its layout refuses, sizes that "
    "do not match, a bound past a size): thunder must raise too, not return an answer",
    "wide_inputs": "about half the inputs of shapes and dtypes the others never draw: sizes past 3 (5, 7, 8, 16, 17, "
    "33: vectorised kernels change path at 8/16/32 lanes), ranks 5 and 6, size-1 dims in every position, int8/uint8/"
    "int16/int32/complex64/complex128 beside float16/bfloat16/float32/float64 (complex ones may require grad, and "
    "the float features take them), each often non-contiguous (transposed, stepped, expanded, channels_last_3d)",
    "op_db": "operations of PyTorch's OpInfo database with their sample inputs as statements (function, method, "
    "in-place and out= forms), only those test_op_db.py passes (differential/op_db_vocabulary.py)",
}

_UNARY = [
    "torch.sin({a})",
    "torch.cos({a})",
    "torch.tanh({a})",
    "torch.sigmoid({a})",
    "torch.relu({a})",
    "{a}.abs()",
    "-{a}",
    "torch.square({a})",
    "F.silu({a})",
    "F.gelu({a})",
    "{a}.clamp(-0.5, 0.5)",
    "torch.exp({a}.tanh())",
    "torch.where({a} > 0, {a}, 0.5 * {a})",
    "F.hardtanh({a}, -1.0, 1.0)",
    "F.leaky_relu({a}, 0.1)",
    "F.hardswish({a})",
    "F.elu({a})",
    "F.relu6({a})",
    "F.mish({a})",
    "torch.erf({a})",
    "torch.rsqrt({a}.abs() + 1)",
]
_SCALAR = ["{a} * 2", "{a} + 1", "{a} * -0.5", "{a} - 3", "2 * {a}", "{a} / 4"]
_BINARY = [
    "{a} + {b}",
    "{a} * {b}",
    "{a} - {b}",
    "torch.maximum({a}, {b})",
    "torch.where({a} > {b}, {a}, {b})",
    "{a} / ({b}.abs() + 1)",
    "torch.add({a}, {b}, alpha=2)",
]
_CAST = ["{a}.double()", "{a}.float()", "{a}.to(torch.int64)", "{a} > 0", "{a} == {b}", "{a}.to({b}.dtype)"]
_REDUCE_ALL = ["{a}.sum()", "{a}.mean()", "{a}.amax()"]
_REDUCE_DIM = [
    "{a}.sum({d})",
    "{a}.sum({d}, keepdim=True)",
    "{a}.mean({d}, keepdim=True)",
    "{a}.amax({d})",
    "torch.logsumexp({a}, {d})",
]
# reductions with singular points (a zero factor, a zero norm, ties, var of one element is NaN):
# drawn with "singular_values"
_REDUCE_ALL_SINGULAR = ["{a}.prod()", "{a}.norm()", "{a}.std()", "{a}.var()"]
_REDUCE_DIM_SINGULAR = [
    "{a}.var({d})",
    "{a}.max({d}).values",
    "{a}.min({d}, keepdim=True)[0]",
    "{a}.prod({d})",
    "torch.linalg.vector_norm({a}, dim={d})",
]
_VIEW = [
    "{a}.t()",
    "{a}.mT",
    "{a}.transpose(0, -1)",
    "{a}.unsqueeze({d})",
    "{a}.reshape(-1)",
    "{a}.view(-1)",
    "{a}.flatten()",
    "{a}[0]",
    "{a}[..., 1:]",
    "{a}[:, :1]",
    "{a}.narrow(-1, 0, 1)",
    "{a}.expand(2, *{a}.shape)",
    "{a}.permute(*reversed(range({a}.ndim)))",
    "{a}.squeeze()",
    "{a}.diagonal()",
    "{a}.select(0, -1)",
    "{a}.contiguous()",
    "{a}.unbind(0)[0]",
    "{a}.chunk(2, -1)[0]",
    "{a}[::2]",
    # the viewed tensor as a keyword or inside a list (the view must still alias it)
    "torch.select(input={a}, dim=0, index=-1)",
    "torch.transpose(input={a}, dim0=0, dim1=-1)",
    "torch.atleast_2d(({a},))[0]",
    # opaque ops (no torch-language symbol) that return a real tensor itself: updates of the result reach it
    "{a}.resolve_neg()",
    "{a}.resolve_conj()",
    "{a}.positive()",
]
_INDEX = [
    "{a}[torch.tensor([0, 0])]",
    "{a}[[-1, 0]]",
    "torch.index_select({a}, {d}, torch.tensor([0]))",
    "{a}.gather({d}, torch.zeros_like({a}, dtype=torch.int64))",
    "{a}.masked_fill({a} > 0, 0.25)",
    "{a}[..., torch.tensor([0, -1, 0])]",
    # concatenation, with the legacy empty 1-D pieces eager skips when checking shapes (still in autograd's graph)
    "torch.cat((torch.atleast_1d({a}), torch.atleast_1d({a}) * 2), 0)",
    "torch.cat([torch.atleast_1d({a}), {a}.reshape(-1)[:0]], -1)",
    "torch.cat([{a}.reshape(-1)[:0], torch.atleast_1d({a}).exp()])",
    "torch.stack([{a}, {a} + 1], {d})",
]
_MATMUL = ["{a} @ {b}", "torch.matmul({a}, {b})", "{a} @ {b}.mT"]
_SOFTMAX = ["torch.softmax({a}, {d})", "F.log_softmax({a}, dim={d})", "{a}.softmax(-1)"]
_INPLACE = [
    "{t}.add_({b})",
    "{t}.mul_({b})",
    "{t}.mul_(2)",
    "{t}.sigmoid_()",
    "{t}.sin_()",
    "{t}.abs_()",
    "{t}.clamp_(min=0)",
    "{t}.pow_(2)",
    "{t}.zero_()",
    "{t}.fill_(1.5)",
    "{t}.copy_({b})",
    "{t}[0] = {b}",
    "{t}[..., :1] = 0.5",
    "{t}.add_({b}, alpha=-1)",
    "{t}.index_copy_(0, torch.tensor([0]), {t}[-1:] * 2)",
    "F.relu({t}, inplace=True)",
    "F.hardtanh({t}, -0.5, 0.5, inplace=True)",
    "F.leaky_relu({t}, 0.2, inplace=True)",
    "F.silu({t}, inplace=True)",
    "F.hardswish({t}, inplace=True)",
    "F.elu({t}, inplace=True)",
    "{t} += {b}",
    "{t} *= 0.5",
]
_ROUNDING = [
    "torch.div({a}, {b}, rounding_mode='trunc')",
    "torch.div({a}, {b}, rounding_mode='floor')",
    "torch.remainder({a}, {b})",
    "torch.fmod({a}, {b})",
    "{a} // ({b}.abs() + 1)",
]
_ROUNDING_INPLACE = [
    "{t}.div_({b}, rounding_mode='trunc')",
    "{t}.fmod_({b})",
    "{t}.remainder_({b})",
    "{t}.logical_not_()",
    "{t}.logical_and_({b})",
    "{t}.eq_({b})",
    "{t}[...] = True",
]
_SCATTER_INPLACE = [
    "{t}.scatter_({d}, torch.zeros_like({t}, dtype=torch.int64), {b}.expand_as({t}))",
    "{t}.scatter_({d}, torch.zeros_like({t}, dtype=torch.int64), 1.5)",
    "{t}.scatter_add_(0, torch.zeros_like({t}, dtype=torch.int64), {t} * 2)",
    "{t}.scatter_reduce_(0, torch.zeros_like({t}, dtype=torch.int64), {b}.expand_as({t}), 'amax')",
    "{t}.index_put_((torch.tensor([0, 0]),), {b}, accumulate=True)",
    "{t}.index_put_((torch.tensor([-1, 0, -1]),), {t}[:1] * 3, accumulate=True)",
    "{t}[{t} > 0] = {b}.sum()",
    "{t}.masked_scatter_({b} > 0, {t} * -2)",
    "{t}.masked_fill_({b} > 0, -1.5)",
    "{t}.index_add_(-1, torch.tensor([0]), {t}[..., -1:], alpha=2)",
    "{t}.clamp_({b}, {b} + 1)",
    "{t}.clamp_(min={b})",
    "{t}.clamp_(max={b}.abs())",
    "{t}.add_(1)",
    "{t}.mul_(-3)",
    "{t}.neg_()",
    "{t}.sub_({b}, alpha=2)",
    "{t}.bitwise_not_()",
    "torch.mul({t}[-1], 2, out={t}[0])",
    # (b summed: an out= that the result's broadcast would resize over the argument it reads is undefined in eager,
    # whose result then depends on its kernel's loop order; thunder refuses it, naming the line)
    "torch.add({t}[0], {b}.sum(), out={t}[0])",
    "torch.clamp({t}, -1, 1, out={t})",
]
_SCATTER_VALUES = [
    "torch.where({a} > 0, 1.5, {a})",
    "torch.where({a} > 0, {a}, -2)",
    "torch.where({a} > 0, 2.0, -1.0)",
    "torch.where({a} != {a}, 0, {b})",
    "{a}.where({b} > 0, 0.5)",
    "torch.clamp({a}, {b}, {b} + 1)",
    "torch.clamp({a}, max={b})",
    "{a}.scatter({d}, torch.zeros_like({a}, dtype=torch.int64), {b}.expand_as({a}))",
    "{a}.index_put((torch.tensor([0, 0]),), {b}, accumulate=True)",
]
# results of results of elementwise ops, reshaped: eager's layout of each follows its arguments' (TensorIterator)
_LAYOUT_CHAINS = [
    "{a}.exp().flatten()",
    "torch.clamp({a}, {a} * 0.5, {a} + 1).flatten()",
    "(({a} * 2).sin() + 1).reshape(-1)",
    "({a} - 1).abs().neg().contiguous()",
    "({a}.transpose(0, -1) * 2).exp().reshape(-1)",
    "(({a} + 1) * 3).sigmoid().view(-1)",
    # the layout read as numbers (of a non-contiguous argument or global: the program is specialised on it)
    "{a} * {a}.stride(-1) + {a}.storage_offset()",
    "{a} * int({a}.is_contiguous())",
    "{a}.view(-1)",
    "torch.mul({a}.detach(), 2, out={a}.new_zeros(1))",
    "torch.add({a}.detach().transpose(0, -1), 1, out={a}.new_empty(0))",
    # composites whose eager result is a view of a tensor made inside them (later updates must keep it one)
    "torch.cov({a}.reshape(-1))",
    "torch.einsum('ij,jk->ki', {a}.reshape(-1, 1), {a}.reshape(1, -1))",
    "torch.tensordot({a}.reshape(-1, 1), {a}.reshape(1, -1)[:, :1], 1)",
    # attention, laid out by the kernel eager picks (flash follows the query's layout, math is contiguous)
    "F.scaled_dot_product_attention({a}, {a}, {a})",
    "F.scaled_dot_product_attention({a}, {a} * 2, {a}, is_causal=True).flatten(-2)",
]
# non-contiguous layouts of an input (``strided_inputs``), by rank; ``{b}`` is ``leaf * 1``
_STRIDED_INPUTS = {
    2: ["{b}.t()", "{b}[:, ::2]", "{b}[0:1].expand(4, -1)", "{b}.t().contiguous().t()"],
    3: ["{b}.permute(2, 0, 1)", "{b}[:, ::2]", "{b}[:1].expand(3, -1, -1)", "{b}.transpose(0, 1)"],
    4: [
        "{b}.contiguous(memory_format=torch.channels_last)",
        "{b}.permute(0, 2, 3, 1)",
        "{b}[:, :, ::2]",
        "{b}[:, :1].expand(-1, 3, -1, -1)",
        "{b}.transpose(1, 3)",
    ],
}
_STRIDED_SHAPES = [(2, 3, 2, 2), (1, 3, 1, 2)]
# how an input that is not a leaf is made from its leaf (``{b}`` is the non-leaf base, ``leaf * 1``)
_INPUT_VIEWS = {
    0: ["{b}"],
    1: ["{b}", "{b}[1:]", "{b}[::2]", "{b}.unsqueeze(0).expand(2, -1)", "{b}.flip(0)[1:]"],
    2: [
        "{b}",
        "{b}[1:]",
        "{b}.t()",
        "{b}[::2]",
        "{b}[:, 1:]",
        "{b}.diagonal()",
        "{b}[0:1].expand(3, -1)",
        "{b}.mT[1:]",
    ],
    3: ["{b}", "{b}[1:]", "{b}.transpose(0, 2)", "{b}[..., ::2]", "{b}.diagonal(0, 1, 2)", "{b}[0]"],
}
_SPECIALS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 0.5, -0.5, 2.5]
_VIEW_OF_TARGET = ["{t}[0]", "{t}.t()", "{t}.mT", "{t}[..., 1:]", "{t}.diagonal()", "{t}.view(-1)", "{t}.select(-1, 0)"]
_DETACH = ["{a}.detach()", "{a} * {b}.detach()", "{a} + (torch.round({a}) - {a}).detach()", "{a}.detach() * {a}"]
_SIZE_VALUES = [
    "{a} * torch.div({a}.shape[-1] + 2, 2, rounding_mode='trunc')",
    "{a} * int(torch.div({a}.numel() + 1, 2, rounding_mode='floor') - 1)",
    "{a}[..., : int(torch.div({a}.shape[-1], 2, rounding_mode='trunc')) + 1]",
    "{a}.new_zeros((torch.tensor({a}.shape[0]) + 1,)).sum() + {a} * float(torch.tensor({a}.ndim) / 2)",
]
_NUMPY = [
    "torch.from_numpy(np.exp({a}.detach().numpy() * 0.1))",
    "{a} * torch.as_tensor(np.maximum({a}.detach().numpy(), 0.25))",
    "{a} + torch.as_tensor(np.mean({a}.detach().numpy()))",
    "torch.from_numpy(np.where({a}.detach().numpy() > 0, {a}.detach().numpy(), 0.5) / 3) * {a}",
    "{a} - torch.tensor(np.sum({a}.detach().numpy(), axis=-1, keepdims=True))",
]
# names of operators generated programs call as globals (the torch executor's prims print as ``pad(...)``,
# ``sum(...)``), and of torch functions (printed as ``torch.<name>``): parameter names with "operator_names"
_OPERATOR_NAMES = [
    "pad",
    "sum",
    "prod",
    "amax",
    "var",
    "sort",
    "take",
    "scatter_add",
    "broadcast_in_dim",
    "convert_element_type",
    "slice_prim",
    "div_prim",
    "squeeze",
    "copy_",
    "add",
    "mul",
    "where",
    "matmul",
    "exp",
]
_FUNCTION = ["ScaleGrad.apply({a})", "MulSaved.apply({a}, {b})", "ClampST.apply({a}, -0.25)", "SinCos.apply({a})[0]"]


@dataclass
class InputSpec:
    """One tensor argument: its values (a nested list), dtype and requires_grad."""

    values: list | float | int | bool
    dtype: torch.dtype
    requires_grad: bool
    alias: str | None = None  # e.g. "a0.mT": this argument is (a view of) an earlier one
    # e.g. "{b}.t()": the argument is this view of ``leaf * 1`` (a non-leaf base), the leaf made from ``values``
    view: str | None = None

    def make(self, earlier: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.alias is not None:
            return eval(self.alias, {"torch": torch}, dict(earlier))
        t = torch.tensor(self.values, dtype=self.dtype).requires_grad_(self.requires_grad)
        if self.view is None:
            return t
        view = eval(self.view.format(b="(leaf * 1)"), {"torch": torch}, {"leaf": t})
        view.fuzz_leaf = t  # the gradient is taken to the leaf (check.py)
        return view

    def source(self) -> str:
        if self.alias is not None:
            return self.alias
        rg = ", requires_grad=True" if self.requires_grad else ""
        leaf = f"torch.tensor({self.values!r}, dtype={self.dtype}{rg})"
        return leaf if self.view is None else self.view.format(b=f"({leaf} * 1)")


def _make_all(specs: list[InputSpec]) -> list[torch.Tensor]:
    made: dict[str, torch.Tensor] = {}
    for i, spec in enumerate(specs):
        made[f"a{i}"] = spec.make(made)
    return list(made.values())


@dataclass
class Program:
    """A drawn program: ``fn(a0, a1, ...)`` runs ``lines`` and returns ``outputs``."""

    inputs: list[InputSpec]
    lines: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    features: frozenset[str] = frozenset()
    # the parameters' names, where not a0, a1, ... ("operator_names"); the lines use them instead
    params: list[str] | None = None
    # keyword arguments of thunder.jit besides ``cache`` ("recompute")
    jit_options: dict = field(default_factory=dict)
    # the inputs the function reads as globals, not arguments ("captured_inputs"): ``bind`` sets them
    captured: tuple[int, ...] = ()
    # the last line raises in eager ("eager_errors"): thunder.jit must raise too
    raises: bool = False

    def _names(self) -> list[str]:
        names = self.params or [f"a{i}" for i in range(len(self.inputs))]
        return [f"a{i}" if i in self.captured else name for i, name in enumerate(names)]

    def function_source(self) -> str:
        names = self._names()
        body = [f"    {line}" for line in self.lines]
        body.append(f"    return {', '.join(self.outputs)},")
        parameters = [name for i, name in enumerate(names) if i not in self.captured]
        source = f"def fn({', '.join(parameters)}):\n" + "\n".join(body) + "\n"
        if self.params:
            source = re.sub(r"\ba(\d+)\b", lambda m: names[int(m.group(1))], source)
        return source

    def make_function(self):
        """``fn``; call it as ``fn(*program.bind(fn, inputs))``."""
        namespace = {"torch": torch, "F": F, "np": np, **FUNCTIONS}
        exec(compile(self.function_source(), "<differential program>", "exec"), namespace)
        return namespace["fn"]

    def bind(self, fn, inputs: list) -> list:
        """The arguments of ``fn`` (from ``make_function``) for ``inputs``, whose captured ones it then reads as
        its globals (rebinding a global makes thunder.jit's cached program miss and trace again)."""
        for i in self.captured:
            fn.__globals__[f"a{i}"] = inputs[i]
        return [t for i, t in enumerate(inputs) if i not in self.captured]

    def make_inputs(self) -> list[torch.Tensor]:
        """Fresh input tensors (arguments that alias an earlier one alias the fresh one)."""
        return _make_all(self.inputs)

    def make_float64_inputs(self) -> list[torch.Tensor]:
        """``make_inputs`` with the float16/bfloat16 inputs in float64 (the same values, which those types hold
        exactly): what the program computes without their rounding, the reference for low-precision results."""
        low = (torch.float16, torch.bfloat16)
        return _make_all([replace(s, dtype=torch.float64) if s.dtype in low else s for s in self.inputs])

    def repro(self) -> str:
        """A standalone script that runs the program eagerly and through thunder.jit."""
        used = [name for name in FUNCTIONS if f"{name}.apply" in self.function_source()]
        parts = ["import numpy as np", "import torch", "import torch.nn.functional as F", "", "import thunder", ""]
        if any(re.search(r"\b(inf|nan)\b", spec.source()) for spec in self.inputs):
            parts.insert(0, "from math import inf, nan  # (special values, as the inputs' lists print them)")
        if used:
            parts.append("from torch.autograd.function import once_differentiable")
            parts.extend(inspect.getsource(FUNCTIONS[name]) for name in used)
        if self.raises:
            parts.append("# (eager raises at fn's last line: thunder.jit must raise too)")
        parts.append(self.function_source())
        names = ", ".join(f"a{i}" for i in range(len(self.inputs)))
        parts.append("def make_inputs():")
        parts.extend(f"    a{i} = {spec.source()}" for i, spec in enumerate(self.inputs))
        parts.append(f"    return {names},\n")
        options = "".join(f", {k}={v!r}" for k, v in self.jit_options.items())
        if not self.captured:
            parts.append("expected = fn(*make_inputs())")
            parts.append(f"actual = thunder.jit(fn{options})(*make_inputs())")
            return "\n".join(parts) + "\n"
        captured = ", ".join(f"a{i}" for i in self.captured)
        arguments = ", ".join(f"a{i}" for i in range(len(self.inputs)) if i not in self.captured)
        parts.append("def call(f):  # (the captured inputs are globals of fn)")
        parts.append(f"    global {captured}")
        parts.append(f"    {names}, = make_inputs()")
        parts.append(f"    return f({arguments})\n")
        parts.append("expected = call(fn)")
        parts.append(f"actual = call(thunder.jit(fn{options}))")
        return "\n".join(parts) + "\n"

    def __repr__(self) -> str:
        return f"\n# features: {sorted(self.features)}\n{self.repro()}"


_SHAPES = [(2, 3), (3,), (2, 1), (1, 3), (), (3, 3), (2, 3, 3), (3, 2)]
_EMPTY_SHAPES = [(0,), (2, 0), (0, 3)]
# "wide_inputs": a few hundred elements at most, so that each program stays fast
_WIDE_SHAPES = [
    (5,),
    (7,),
    (8,),
    (16,),
    (17,),
    (33,),
    (1, 1),
    (2, 8),
    (3, 17),
    (8, 16),
    (4, 1, 1),
    (1, 7, 1),
    (1, 5, 1, 2),
    (2, 1, 3, 1, 2),
    (1, 2, 2, 3, 2),
    (2, 2, 1, 2, 1, 3),
    (1, 2, 1, 2, 1, 2),
]
_WIDE_DTYPES = [
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.complex64,
    torch.complex128,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
]
# non-contiguous layouts of a "wide_inputs" input, by rank (``{b}`` is ``leaf * 1``)
_WIDE_LAYOUTS = {
    1: ["{b}[::2]", "{b}[1:]", "{b}[:1].expand(6)", "{b}[2::3]"],
    2: ["{b}.t()", "{b}[:, ::2]", "{b}[:1].expand(5, -1)", "{b}.t().contiguous().t()"],
    3: ["{b}.permute(2, 0, 1)", "{b}[..., ::2]", "{b}[:1].expand(3, -1, -1)", "{b}.transpose(0, 1)"],
    4: ["{b}.contiguous(memory_format=torch.channels_last)", "{b}.permute(0, 2, 3, 1)", "{b}[:, :, ::2]"],
    5: [
        "{b}.contiguous(memory_format=torch.channels_last_3d)",
        "{b}.transpose(1, 4)",
        "{b}[:, :, ::2]",
        "{b}[:, :1].expand(-1, 3, -1, -1, -1)",
        "{b}.permute(4, 3, 2, 1, 0)",
    ],
    6: [
        "{b}.transpose(0, 5)",
        "{b}[..., ::2]",
        "{b}[:1].expand(2, -1, -1, -1, -1, -1)",
        "{b}.permute(5, 0, 4, 1, 3, 2)",
    ],
}


@st.composite
def _wide_input_spec(draw, features: frozenset[str]) -> InputSpec:
    """An input of "wide_inputs": a shape among ``_WIDE_SHAPES`` (or the usual ones) and a dtype among
    ``_WIDE_DTYPES``, often laid out non-contiguously."""
    shape = draw(st.sampled_from(_WIDE_SHAPES + _SHAPES))
    dtype = draw(st.sampled_from(_WIDE_DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    if dtype.is_floating_point or dtype.is_complex:
        values = torch.randn(shape, generator=gen, dtype=torch.complex128 if dtype.is_complex else torch.float64)
        if "singular_values" in features and draw(st.booleans()):
            values = (values * 2).round() / 2 if dtype.is_floating_point else values.real.round() + 0j
        requires_grad = draw(st.booleans())
    elif dtype == torch.uint8:
        values, requires_grad = torch.randint(0, 8, shape, generator=gen), False
    else:
        values, requires_grad = torch.randint(-3, 4, shape, generator=gen), False
    values = values.to(dtype).tolist()
    view = None
    if draw(st.booleans()) and len(shape) in _WIDE_LAYOUTS:
        view = draw(st.sampled_from(_WIDE_LAYOUTS[len(shape)]))
        try:  # a layout the shape allows (an expand of a dim that is not 1 ...)
            eval(view.format(b="t"), {"torch": torch}, {"t": torch.tensor(values, dtype=dtype)})
        except Exception:
            view = None
    return InputSpec(values, dtype, requires_grad, view=view)


@st.composite
def _input_spec(draw, features: frozenset[str]) -> InputSpec:
    if "wide_inputs" in features and draw(st.booleans()):  # (no draw without it: the other features' draws stay)
        return draw(_wide_input_spec(features))
    shapes = _SHAPES + (_EMPTY_SHAPES if "special_values" in features else [])
    if "op_db" in features:  # the shapes of op_db's sample inputs, so that templates apply to the inputs
        shapes = shapes + [s for s in input_shapes() if s not in shapes]
    if "strided_inputs" in features:
        shapes = shapes + _STRIDED_SHAPES
    shape = draw(st.sampled_from(shapes))
    dtypes = [torch.float64]
    if "mixed_dtype" in features:
        dtypes += [torch.float32, torch.int64, torch.bool]
    if "low_precision" in features:
        dtypes += [torch.float16, torch.bfloat16]
    dtype = draw(st.sampled_from(dtypes))
    seed = draw(st.integers(0, 2**16))
    gen = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        values = torch.randn(shape, generator=gen, dtype=torch.float64)
        if "singular_values" in features and draw(st.booleans()):
            values = (values * 2).round() / 2  # zeros and ties
        if "special_values" in features and values.numel() and draw(st.booleans()):
            flat = values.reshape(-1)
            for i in draw(st.lists(st.integers(0, flat.numel() - 1), min_size=1, max_size=3)):
                flat[i] = draw(st.sampled_from(_SPECIALS))
        requires_grad = draw(st.booleans())
    elif dtype == torch.bool:
        values, requires_grad = torch.randn(shape, generator=gen) > 0, False
    else:
        values, requires_grad = torch.randint(-3, 4, shape, generator=gen), False
    values = values.to(dtype).tolist()
    view = None
    if "view_inputs" in features and dtype.is_floating_point and requires_grad and draw(st.booleans()):
        made = torch.tensor(values)  # (an empty tensor's nested list may not keep its shape: (0, 3) reads as (0,))
        view = draw(st.sampled_from(_INPUT_VIEWS.get(made.ndim, ["{b}"])))
        try:  # a view the shape allows (diagonal of a 0-row matrix, expand of an empty one ...)
            eval(view.format(b="t"), {"torch": torch}, {"t": made})
        except Exception:
            view = None
    if "strided_inputs" in features and view is None and dtype != torch.bool and draw(st.booleans()):
        made = torch.tensor(values, dtype=dtype)
        if made.ndim in _STRIDED_INPUTS and made.numel():
            view = draw(st.sampled_from(_STRIDED_INPUTS[made.ndim]))
            try:
                eval(view.format(b="t"), {"torch": torch}, {"t": made})
            except Exception:
                view = None
    return InputSpec(values, dtype, requires_grad, view=view)


def _names(env: dict, pred=lambda t: True) -> list[str]:
    return [k for k, v in env.items() if isinstance(v, torch.Tensor) and pred(v)]


def _float(t: torch.Tensor) -> bool:
    return t.is_floating_point()


def _candidate(draw, feature: str, env: dict, new: str, enabled: frozenset[str]) -> str | None:
    """One source line for ``feature`` over the names in ``env``, or None if nothing fits."""
    tensors = _names(env)
    floats = _names(env, _float)
    if "wide_inputs" in enabled:  # complex tensors take the float features' ops too (eager drops those it refuses)
        floats = _names(env, lambda t: t.is_floating_point() or t.is_complex())
    viewable = tensors if "zero_dim_views" in enabled else _names(env, lambda t: t.ndim > 0)

    def pick(names):
        return draw(st.sampled_from(names)) if names else None

    def dim(name):
        ndim = env[name].ndim
        return draw(st.integers(-ndim, ndim - 1)) if ndim else 0

    def inplace_target(kind: str):
        if kind == "inplace_input":
            names = [n for n in tensors if n.startswith("a")]
        else:
            names = [n for n in tensors if n.startswith("v")]
        t = pick(names)
        if t is None:
            return None
        if kind == "inplace_view":
            if t not in viewable:
                return None
            t = draw(st.sampled_from(_VIEW_OF_TARGET)).format(t=t)
        return t

    if feature == "elementwise":
        a = pick(floats)
        return a and f"{new} = " + draw(st.sampled_from(_UNARY + _SCALAR)).format(a=a)
    if feature == "broadcast":
        a, b = pick(tensors), pick(tensors)
        return a and f"{new} = " + draw(st.sampled_from(_BINARY)).format(a=a, b=b)
    if feature == "mixed_dtype":
        a, b = pick(tensors), pick(tensors)
        return a and f"{new} = " + draw(st.sampled_from(_CAST)).format(a=a, b=b)
    if feature == "reduction":
        a = pick(floats)
        if a is None:
            return None
        singular = "singular_values" in enabled
        if env[a].ndim and draw(st.booleans()):
            templates = _REDUCE_DIM + (_REDUCE_DIM_SINGULAR if singular else [])
            return f"{new} = " + draw(st.sampled_from(templates)).format(a=a, d=dim(a))
        return f"{new} = " + draw(st.sampled_from(_REDUCE_ALL + (_REDUCE_ALL_SINGULAR if singular else []))).format(a=a)
    if feature == "view":
        a = pick(viewable)
        return a and f"{new} = " + draw(st.sampled_from(_VIEW)).format(a=a, d=dim(a))
    if feature == "indexing":
        a = pick(_names(env, lambda t: t.ndim > 0))
        return a and f"{new} = " + draw(st.sampled_from(_INDEX)).format(a=a, d=dim(a))
    if feature == "matmul":
        pairs = [
            (x, y)
            for x in floats
            for y in floats
            if env[x].ndim >= 1 and env[y].ndim >= 1 and env[x].shape[-1] == env[y].shape[-2 if env[y].ndim > 1 else 0]
        ]
        if not pairs:
            return None
        a, b = draw(st.sampled_from(pairs))
        return f"{new} = " + draw(st.sampled_from(_MATMUL[:2])).format(a=a, b=b)
    if feature == "softmax":
        a = pick(floats)
        return a and f"{new} = " + draw(st.sampled_from(_SOFTMAX)).format(a=a, d=dim(a))
    if feature in ("inplace", "inplace_view", "inplace_input"):
        t = inplace_target(feature)
        b = pick(tensors)
        return t and draw(st.sampled_from(_INPLACE)).format(t=t, b=b)
    if feature == "rounding":
        if draw(st.booleans()):
            t = inplace_target(draw(st.sampled_from(["inplace", "inplace_input"])))
            return t and draw(st.sampled_from(_ROUNDING_INPLACE)).format(t=t, b=pick(tensors))
        a, b = pick(floats), pick(tensors)
        return a and f"{new} = " + draw(st.sampled_from(_ROUNDING)).format(a=a, b=b)
    if feature == "detach":
        a, b = pick(floats), pick(floats)
        return a and f"{new} = " + draw(st.sampled_from(_DETACH)).format(a=a, b=b)
    if feature == "no_grad":
        if draw(st.booleans()):
            t = inplace_target(draw(st.sampled_from(["inplace", "inplace_input"])))
            stmt = t and draw(st.sampled_from(_INPLACE)).format(t=t, b=pick(tensors))
        else:
            a, b = pick(floats), pick(tensors)
            stmt = a and f"{new} = " + draw(st.sampled_from(_UNARY + _BINARY)).format(a=a, b=b)
        return stmt and f"with torch.no_grad(): {stmt}"
    if feature == "size_values":
        a = pick(_names(env, lambda t: t.is_floating_point() and t.ndim > 0))
        return a and f"{new} = " + draw(st.sampled_from(_SIZE_VALUES)).format(a=a)
    if feature == "numpy":
        # (NumPy has no bfloat16: eager's .numpy() refuses it; 0-d arrays reduced with axis=-1 would too)
        a = pick(_names(env, lambda t: t.dtype in (torch.float32, torch.float64) and t.ndim > 0))
        return a and f"{new} = " + draw(st.sampled_from(_NUMPY)).format(a=a)
    if feature == "autograd_function":
        a = pick(floats)
        if a is None:
            return None
        same = [n for n in floats if env[n].shape == env[a].shape and env[n].dtype == env[a].dtype]
        return f"{new} = " + draw(st.sampled_from(_FUNCTION)).format(a=a, b=pick(same))
    if feature == "scatter_updates":
        if draw(st.booleans()):
            t = inplace_target(draw(st.sampled_from(["inplace", "inplace_input", "inplace_view"])))
            if t is None:
                return None
            target = t.split("[")[0].split(".")[0]
            return draw(st.sampled_from(_SCATTER_INPLACE)).format(t=t, b=pick(tensors), d=dim(target))
        a = pick(tensors)
        return a and f"{new} = " + draw(st.sampled_from(_SCATTER_VALUES)).format(a=a, b=pick(tensors), d=dim(a))
    if feature == "layout_chains":
        a = pick(floats)
        return a and f"{new} = " + draw(st.sampled_from(_LAYOUT_CHAINS)).format(a=a)
    if feature == "op_db":
        return _op_db_statement(draw, env, new, floats)
    raise ValueError(f"unknown feature {feature!r}")


def _op_db_statement(draw, env: dict, new: str, floats: list[str]) -> str | None:
    """An op_db template applied to a program tensor of its sample's shape, or to its sample input shifted by a
    program tensor's mean (gradients still reach the program's inputs) when none has that shape."""
    templates = vocabulary()
    shapes = {tuple(env[n].shape) for n in floats}
    fitting = [t for t in templates if t.shape in shapes]
    if fitting and draw(st.booleans()):
        template = draw(st.sampled_from(fitting))
        a = draw(st.sampled_from([n for n in floats if tuple(env[n].shape) == template.shape]))
        return template.source.format(a=a, new=new)
    template = draw(st.sampled_from(templates))
    shift = draw(st.sampled_from(floats)) if floats else None
    made = template.literal_input + (f" + {shift}.mean()" if shift else "")
    if template.form == "inplace":  # updates an intermediate made here
        return f"{new} = {made}; " + template.source.format(a=new, new=new)
    return template.source.format(a=f"({made})", new=new)


_MODIFIERS = {
    "singular_values",
    "zero_dim_views",
    "aliased_inputs",
    "view_inputs",
    "special_values",
    "low_precision",
    "operator_names",
    "recompute",
    "strided_inputs",
    "captured_inputs",
    "eager_errors",
    "wide_inputs",
}  # features that change other features' draws
_STATEMENT_FEATURES = [f for f in FEATURES if f not in _MODIFIERS]


@st.composite
def programs(draw, features: frozenset[str] | set[str] = frozenset(FEATURES), max_lines: int = 8) -> Program:
    """A random program that eager PyTorch runs, using only ``features``."""
    features = frozenset(features)
    unknown = features - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown features {sorted(unknown)}; known: {sorted(FEATURES)}")
    stmt_features = [f for f in _STATEMENT_FEATURES if f in features]
    if not stmt_features:
        raise ValueError("no statement feature enabled")
    inputs = draw(st.lists(_input_spec(features), min_size=1, max_size=3))
    if not any(spec.dtype.is_floating_point for spec in inputs):
        shape = torch.tensor(inputs[0].values).shape
        values = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        inputs[0] = InputSpec(values.tolist(), torch.float64, True)
    if "aliased_inputs" in features:
        for i in range(1, len(inputs)):
            if draw(st.booleans()):
                shape = _make_all(inputs[:1])[0].shape  # (a0 may be an empty tensor: no a0[0] then)
                views = ["a0"] + (["a0[..., :1]"] if shape else []) + (["a0[0]"] if shape and shape[0] else [])
                views += ["a0.mT"] if len(shape) >= 2 else []
                inputs[i] = InputSpec(
                    None, inputs[0].dtype, inputs[0].requires_grad, alias=draw(st.sampled_from(views))
                )
    env: dict = {"torch": torch, "F": F, "np": np, **FUNCTIONS}
    for i, t in enumerate(_make_all(inputs)):
        env[f"a{i}"] = t
    lines: list[str] = []
    n_lines = draw(st.integers(1, max_lines))
    counter = 0
    raises = False
    for _ in range(n_lines):
        feature = draw(st.sampled_from(stmt_features))
        new = f"v{counter}"
        tensors = {k: v for k, v in env.items() if isinstance(v, torch.Tensor)}
        line = _candidate(draw, feature, tensors, new, features)
        if not line:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(line, env)
        except Exception as refusal:
            env.pop(new, None)
            # (eager's own refusals of the values, not a line Python cannot compile)
            refused = isinstance(refusal, (RuntimeError, IndexError, ValueError)) and not isinstance(
                refusal, SyntaxError
            )
            if "eager_errors" in features and refused and draw(st.integers(0, 3)) == 0:
                lines.append(line)  # (the program's last line: thunder must reject it as eager does)
                # (its result, or the tensor it updates, returned: a compiled program may drop a dead computation,
                # whose error eager raises)
                target = re.match(r"(\w+)\s*[.\[+\-*/]", line.removeprefix("with torch.no_grad(): "))
                if line.startswith(f"{new} = "):
                    raises = new
                elif target and isinstance(env.get(target.group(1)), torch.Tensor):
                    raises = target.group(1)
                else:
                    raises = True
                break
            continue  # eager rejects it: drop the line
        if new in env:
            if not isinstance(env[new], torch.Tensor):
                del env[new]
                continue
            counter += 1
        lines.append(line)
    names = _names({k: v for k, v in env.items() if k[0] in "av" and k[1:].isdigit()})
    produced = [n for n in names if n.startswith("v")]
    last = produced[-1:] if produced else [names[0]]
    # favour returning what the program updated in place, so lost updates show in the outputs
    mutated = [n for n in names if any(line.startswith(n + ".") or line.startswith(n + "[") for line in lines)]
    extra = draw(st.lists(st.sampled_from(mutated + names), max_size=3, unique=True))
    outputs = list(dict.fromkeys(([raises] if type(raises) is str else []) + last + extra))
    program = Program(inputs, lines, outputs, features, raises=bool(raises))
    if "operator_names" in features:
        # chosen from the program drawn, not drawn: the other features' programs stay those of the same seed
        pick = random.Random(zlib.crc32(program.function_source().encode()))
        if pick.random() < 0.5:
            program.params = pick.sample(_OPERATOR_NAMES, len(inputs))
    if "recompute" in features and zlib.crc32(b"recompute" + program.function_source().encode()) % 2:
        program.jit_options = {"recompute": "reshapes"}  # (chosen as operator_names is: the draws stay the same)
    if "captured_inputs" in features and len(inputs) > 1:
        # (chosen as operator_names is; a0 stays an argument)
        pick = random.Random(zlib.crc32(b"captured" + program.function_source().encode()))
        if pick.random() < 0.3:
            # (not an argument that is a view of another: thunder refuses to update either, a documented limit)
            free = [i for i in range(1, len(inputs)) if inputs[i].alias is None]
            program.captured = tuple(i for i in free if pick.random() < 0.6) or tuple(free[-1:])
    return program
