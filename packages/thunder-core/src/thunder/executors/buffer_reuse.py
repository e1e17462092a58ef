"""Elementwise calls run in place into an operand the program no longer needs, as eager's in-place code does.

Model code writes ``nn.ReLU(inplace=True)`` and ``x += shortcut``; a traced program is functional, so
each becomes a call that allocates a new tensor. Eager writes into the existing one instead: a CNN's
training step runs about a hundred activations and residual additions in place (RegNet: 49 ``relu_``
and 85 ``add_``). A fresh allocation costs more than the arithmetic at these sizes (on a CPU the new
pages are touched for the first time: an out-of-place ``relu`` of a 3.2 MB activation took 129 µs,
in place 75 µs).

:func:`reuse_dead_buffers` rewrites, in a trace claimed by the torch executor, a call of an
elementwise operator (``relu``, ``add``, ``mul``, ``sigmoid``…) into its in-place form writing into
an operand ``t`` (its first, or either operand of ``add`` and ``mul`` without other arguments) when

- ``t`` was computed by the program, by an operator that always returns new memory (a convolution, a
  normalisation, an elementwise call, a matmul, their backward kernels: the ``_FRESH`` table), so no
  argument, no module state and no other value of the program shares its memory;
- this call is ``t``'s only use: nothing reads ``t`` or a view of it afterwards, the program does not
  return it and the backward does not save it;
- the result has ``t``'s dtype, shape and device (no type promotion, no broadcast into a larger shape).

Values are unchanged: the in-place kernel computes what the out-of-place one does, into memory that
nothing else reads. The printed trace shows the in-place call, with the call it replaces as its
decomposition.
"""

from __future__ import annotations

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.symbolic import same_shape
from thunder.core.trace import TraceCtx, from_trace, timed_pass
from thunder.executors.torchex import torch_op

__all__ = ["reuse_dead_buffers"]

# torch-executor operators -> the same call writing into its first argument, as a Tensor method
_TENSOR_METHOD_OPS = (
    "add sub mul div abs neg exp expm1 log log1p sqrt rsqrt reciprocal sin cos tanh sigmoid erf floor ceil trunc"
).split()
# torch-executor operators whose torch function takes ``inplace=``: the same call with ``inplace=True``
_INPLACE_FLAG_OPS = "relu relu6 hardtanh silu hardswish hardsigmoid leaky_relu elu selu celu mish".split()
# binary operators whose operands may swap (floating-point addition and multiplication are commutative)
_COMMUTATIVE = frozenset(("add", "mul"))

_IN_PLACE_FORM: dict[str, object] = {
    **{
        f"torch::{n}": torch_op(f"{n}_reusing", print_name=f"Tensor.{n}_", imports=("from torch import Tensor",))
        for n in _TENSOR_METHOD_OPS
    },
    **{
        f"torch::{n}": torch_op(
            f"{n}_reusing", print_name=f"torch.nn.functional.{n}", imports=("import torch.nn.functional",)
        )
        for n in _INPLACE_FLAG_OPS
    },
}
_INPLACE_FLAG_IDS = frozenset(f"torch::{n}" for n in _INPLACE_FLAG_OPS)

# operators whose outputs are always new memory, never an argument, a view of one or state kept elsewhere
_FRESH = frozenset(
    (
        *(f"torch::{n}" for n in (*_TENSOR_METHOD_OPS, *_INPLACE_FLAG_OPS)),
        *(f"torch::{n}_reusing" for n in (*_TENSOR_METHOD_OPS, *_INPLACE_FLAG_OPS)),
        *(
            f"torch::{n}"
            for n in (
                "conv1d conv2d conv3d convolution convolution_backward linear matmul gelu gelu_backward "
                "threshold_backward hardtanh_backward hardswish_backward sigmoid_backward tanh_backward silu_backward "
                "batch_norm_updating_stats batch_norm_functional functional_batch_norm_updating_stats "
                "native_batch_norm_train native_batch_norm_backward native_layer_norm native_layer_norm_backward "
                "layer_norm group_norm softmax log_softmax adaptive_avg_pool2d adaptive_avg_pool_backward "
                "avg_pool2d max_pool_with_indices max_pool_with_indices_backward"
            ).split()
        ),
    )
)


def reuse_dead_buffers(trace: TraceCtx) -> TraceCtx:
    """``trace`` with elementwise calls run in place into operands nothing reads afterwards (module docstring)."""
    with timed_pass("Reuse dead buffers") as t:
        bsyms = trace.bound_symbols
        uses: dict[str, int] = {}
        fresh: set[str] = set()
        for bsym in bsyms:
            for p in bsym.flat_args:
                uses[p.name] = uses.get(p.name, 0) + 1
            if bsym.sym.id in _FRESH:
                fresh.update(o.name for o in bsym.flat_outs if isinstance(o, TensorProxy))
        replaced: dict[int, BoundSymbol] = {}
        for i, bsym in enumerate(bsyms):
            form = _IN_PLACE_FORM.get(bsym.sym.id)
            if form is None or not isinstance(bsym.output, TensorProxy) or not bsym.args:
                continue
            target = _writable_operand(bsym, fresh, uses)
            if target is None:
                continue
            args, kwargs = bsym.args, _given(bsym.kwargs)
            if target == 1:  # add(a, t) -> Tensor.add_(t, a)
                args = (args[1], args[0])
            if bsym.sym.id in _INPLACE_FLAG_IDS:
                kwargs["inplace"] = True
            new = BoundSymbol(form, tuple(args), kwargs, bsym.output, subsymbols=[bsym], source=bsym.source)
            new.header = bsym.header
            replaced[i] = new
        if not replaced:
            return trace
        new_trace = from_trace(trace)
        new_trace.bound_symbols = [replaced.get(i, b) for i, b in enumerate(bsyms)]
        new_trace.scopes = [new_trace.bound_symbols]
        return t.stamp(new_trace)


def _given(kwargs: dict) -> dict:
    # the keyword arguments given a value: None is each of these operators' default (out, alpha, rounding_mode)
    return {k: v for k, v in kwargs.items() if v is not None}


def _writable_operand(bsym: BoundSymbol, fresh: set[str], uses: dict[str, int]) -> int | None:
    """The position (0 or 1) of the operand ``bsym`` may write its result into, or None."""
    out = bsym.output
    kwargs = _given(bsym.kwargs)
    if "out" in kwargs:
        return None
    if bsym.sym.id in _INPLACE_FLAG_IDS:
        if kwargs.get("inplace", False) is not False or len(bsym.args) != 1:
            return None
        positions = (0,)
    elif bsym.sym.id.removeprefix("torch::") in _COMMUTATIVE and not kwargs and len(bsym.args) == 2:
        positions = (0, 1)
    else:
        positions = (0,)
    for pos in positions:
        a = bsym.args[pos]
        if (
            isinstance(a, TensorProxy)
            and a.name in fresh
            and uses.get(a.name) == 1
            and a.dtype == out.dtype
            and same_shape(a.shape, out.shape)
            and a.device == out.device
        ):
            return pos
    return None
