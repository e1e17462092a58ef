"""The torch executor: runs torch-language symbols and prims with PyTorch's own functions.

Torch-language symbols map one-to-one onto the torch callable they model, so the final trace
calls ``torch``/``Tensor`` functions directly. Prims take thunder metadata (dtypes, devices);
their operators print and run with the torch equivalents.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F

from thunder.core import devices, dtypes, prims
from thunder.core.symbol import Symbol
from thunder.executors.base import OperatorExecutor

__all__ = ["ex", "no_autocast", "torch_op"]

ex = OperatorExecutor("torch", version=torch.__version__)

_TORCH_NAMESPACES = (
    ("torch.nn.functional", F),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
    ("torch", torch),
)


def torch_path(fn) -> tuple[str, str] | None:
    """``(printed name, import line)`` for a torch callable, e.g. ``("Tensor.view", "from torch import Tensor")``."""
    name = getattr(fn, "__name__", None)
    if name is None:
        # getset descriptor getters such as Tensor.T.__get__
        owner = getattr(fn, "__self__", None)
        if owner is not None and getattr(owner, "__objclass__", None) is torch.Tensor:
            return None
        return None
    if isinstance(fn, torch._ops.OpOverloadPacket):
        return f"torch.ops.{fn._qualified_op_name.replace('::', '.')}", "import torch"
    for path, mod in _TORCH_NAMESPACES:
        if getattr(mod, name, None) is fn:
            return f"{path}.{name}", f"import {path}"
    if getattr(torch.Tensor, name, None) is fn:
        return f"Tensor.{name}", "from torch import Tensor"
    return None


def torch_op(
    name: str, fn=None, *, print_name: str | None = None, imports=(), torch_args: bool = False, tags: tuple = ()
) -> Symbol:
    """An operator of the torch executor; ``torch_args`` prints thunder dtypes/devices as torch ones."""
    call_ctx = None if print_name is not None else {name: fn}
    sym = Symbol(
        name,
        None,
        id=f"torch::{name}",
        is_prim=True,
        print_name=print_name or name,
        imports=imports,
        call_ctx=call_ctx,
        executor=ex,
        tags=(("torch_args",) if torch_args else ()) + tuple(tags),
    )
    return sym


def _canonical_torch_fn(sym):
    """The first torch callable a symbol was declared with (declarations list the one matching its signature first)."""
    fns = getattr(sym, "torch_fns", ())
    return fns[0] if fns else None


def register_ltorch(sym: Symbol, fn=None) -> None:
    """Maps a torch-language symbol to the torch callable it models."""
    fn = fn or _canonical_torch_fn(sym)
    path = torch_path(fn) if fn is not None else None
    if path is None:
        return
    print_name, imp = path
    ex.register_implementation(sym, torch_op(sym.name, print_name=print_name, imports=(imp,)))


def _register_all_ltorch():
    import thunder.torch as ltorch
    from thunder.torch.registry import symbols_by_name

    for sym in symbols_by_name.values():
        register_ltorch(sym)
    for name, fn in (
        ("full", torch.full),
        ("arange", torch.arange),
        ("randn", torch.randn),
        ("rand", torch.rand),
        ("linspace", torch.linspace),
        ("eye", torch.eye),
        ("tensor", torch.tensor),
        ("randint", torch.randint),
    ):
        register_ltorch(getattr(ltorch, name), fn)
    ex.register_implementation(ltorch.normal, torch_op("normal_draws", _normal_draws))
    ex.register_implementation(ltorch.setitem, torch_op("setitem", _setitem))
    ex.register_implementation(ltorch.copy, torch_op("copy_to", _copy_to))
    ex.register_implementation(ltorch.view, torch_op("view_values", _view))
    ex.register_implementation(ltorch.view_as, torch_op("view_as_values", _view_as))
    ex.register_implementation(ltorch.batch_norm_functional, torch_op("batch_norm_functional", _batch_norm_functional))
    from thunder.torch.backward import convolution_backward

    ex.register_implementation(convolution_backward, torch_op("convolution_backward", _convolution_backward))
    from thunder.torch.native_kernels import pool_kernels, run_by_rank

    for name, (sym, kernels) in pool_kernels.items():
        ex.register_implementation(sym, torch_op(name, run_by_rank(kernels)))


# a depthwise convolution's input at most this many pixels (H * W) gets its CPU backward in the contiguous layout
_SMALL_DEPTHWISE_MAP = 16


def _convolution_backward(
    grad_output, a, weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask
):
    """Eager's ``convolution_backward``. On the CPU, a depthwise convolution of a small channels-last feature map (the
    last blocks of EfficientNet and MobileNet: 672-1,152 channels of 2x2 or 4x4 pixels) runs with contiguous
    arguments and gives its input's gradient back in channels-last: PyTorch's channels-last kernel for it took 1.5-3x
    the contiguous one's time there (EfficientNet-B0's fused training step: 0.92x with this), and the conversions of
    tensors this small cost microseconds. The same values, from the same kernel family."""
    args = (weight, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, output_mask)
    if (
        groups > 1
        and not transposed
        and a.dim() == 4
        and a.device.type == "cpu"
        and groups == a.shape[1]
        and a.shape[2] * a.shape[3] <= _SMALL_DEPTHWISE_MAP
        and a.is_contiguous(memory_format=torch.channels_last)
        and not a.is_contiguous()
    ):
        grad_input, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
            grad_output.contiguous(), a.contiguous(), *args
        )
        if grad_input is not None:
            grad_input = grad_input.contiguous(memory_format=torch.channels_last)
        return grad_input, grad_weight, grad_bias
    return torch.ops.aten.convolution_backward(grad_output, a, *args)


def _normal_draws(mean, std, shape, *, device, dtype):
    # the draws of Tensor.normal_ on a tensor of this shape
    return torch.empty(shape, device=device, dtype=dtype).normal_(mean, std)


def _setitem(a, key, value):
    out = a.clone()
    out[key] = value
    return out


def _view(a, *shape, size=None):
    # Tensor.view's values, as a reshape: a view wherever eager's view succeeds on that layout, and a copy where
    # the tensor the program computed is laid out unlike eager's (x.copy_(row) runs as an expand of row)
    return a.reshape(*shape) if size is None else a.reshape(size)


def _view_as(a, other):
    return a.reshape(other.shape)


def _copy_to(a, src, non_blocking=False):
    if not isinstance(src, torch.Tensor):  # x.copy_(1.5)
        return torch.full_like(a, src)
    # a's new elements in memory of its own (a's layout), as eager's a.copy_(src): src converted and expanded would
    # be src itself or a view of it, and a returned a would share src's memory
    return torch.empty_like(a).copy_(src)


def _batch_norm_functional(a, running_mean, running_var, weight, bias, training, momentum, eps):
    if training and running_mean is not None:
        running_mean = running_mean.clone()
        running_var = running_var.clone()
    out = F.batch_norm(a, running_mean, running_var, weight, bias, training, momentum, eps)
    if not training or running_mean is None:
        return out, None, None
    return out, running_mean, running_var


# ---------------------------------------------------------------- prims


def _prim_op(prim, torch_fn=None, *, impl=None, name=None):
    if impl is not None:
        op = torch_op(name or f"prim_{prim.name}", impl)
    else:
        print_name, imp = torch_path(torch_fn)
        op = torch_op(prim.name, print_name=print_name, imports=(imp,), torch_args=True)
    ex.register_implementation(prim, op)


_same_name_elementwise = (
    "abs neg exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
    "sqrt rsqrt reciprocal erf erfc erfinv lgamma digamma sign floor ceil round trunc bitwise_not isfinite isnan "
    "isinf signbit add sub mul pow maximum minimum fmod remainder atan2 bitwise_and bitwise_or bitwise_xor "
    "copysign nextafter floor_divide eq ne lt le gt ge where"
).split()

for _n in _same_name_elementwise:
    _prim_op(getattr(prims, _n), getattr(torch, _n))


def div_prim(a, b):
    # prims.div truncates on integers (C semantics) and is true division on floats
    if _is_integral(a) and _is_integral(b):
        return torch.div(a, b, rounding_mode="trunc")
    return torch.true_divide(a, b)


def _is_integral(x) -> bool:
    if isinstance(x, torch.Tensor):
        return not x.is_floating_point() and not x.is_complex()
    return isinstance(x, int)


_prim_op(prims.shift_left, torch.bitwise_left_shift)
_prim_op(prims.shift_right_arithmetic, torch.bitwise_right_shift)
_prim_op(prims.reshape, torch.reshape)
_prim_op(prims.transpose, torch.permute)
_prim_op(prims.cat, torch.cat)
_prim_op(prims.flip, torch.flip)
_prim_op(prims.clone, torch.clone)
_prim_op(prims.matmul, torch.matmul)
_prim_op(prims.linear, F.linear)
_prim_op(prims.embedding, F.embedding)
_prim_op(prims.full, torch.full)
_prim_op(prims.randn, torch.randn)
_prim_op(prims.cumsum, torch.cumsum)
_prim_op(prims.argmax, torch.argmax)
_prim_op(prims.argmin, torch.argmin)
_prim_op(prims.topk, torch.topk)


def convert_element_type(a, dtype):
    return a.to(dtypes.to_torch_dtype(dtype))


def broadcast_in_dim(a, shape, broadcast_dimensions):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape)


def slice_prim(a, start_indices, end_indices, strides=None):
    strides = strides or [1] * a.ndim
    return a[tuple(slice(s, e, st) for s, e, st in zip(start_indices, end_indices, strides))]


def squeeze(a, dims):
    return a.squeeze(tuple(dims)) if dims else a


def pad(a, padding_value, padding_config):
    if any(interior for _, _, interior in padding_config):
        shape = [n + max(n - 1, 0) * i for n, (_, _, i) in zip(a.shape, padding_config)]
        out = torch.full(shape, padding_value, dtype=a.dtype, device=a.device)
        out[tuple(slice(None, None, i + 1) for _, _, i in padding_config)] = a
        a = out
    flat = []
    for lo, hi, _ in reversed(padding_config):
        flat += [lo, hi]
    if isinstance(padding_value, complex):  # (F.pad takes a real value: a complex gradient's zeros come as 0j)
        if padding_value.imag == 0:
            return F.pad(a, flat, value=padding_value.real)
        padded = F.pad(torch.zeros(a.shape, dtype=torch.bool, device=a.device), flat, value=True)
        return torch.where(padded, padding_value, F.pad(a, flat))
    return F.pad(a, flat, value=padding_value)


def stride_order(a, order):
    if order == (3, 0, 2, 1):
        return a.contiguous(memory_format=torch.channels_last)
    if order == (4, 0, 3, 2, 1):
        return a.contiguous(memory_format=torch.channels_last_3d)
    if list(order) == sorted(order, reverse=True):
        return a.contiguous()
    # (dims from the largest stride to the smallest): a copy laid out in that order, seen in a's dim order
    outer_to_inner = sorted(range(a.ndim), key=lambda d: -order[d])
    laid_out = a.permute(outer_to_inner).contiguous()
    return laid_out.permute([outer_to_inner.index(d) for d in range(a.ndim)])


def take(a, index, dim):
    return torch.index_select(a, dim, index.reshape(-1)) if index.ndim == 0 else torch.index_select(a, dim, index)


def take_along_axis(a, index, dim):
    return torch.gather(a, dim, index)


def scatter_add(a, index, value, dim):
    return torch.scatter_add(a, dim, index, value)


def scatter(a, index, src, dim):
    return torch.scatter(a, dim, index, src)


def unfold(a, dim, size, step):
    return a.unfold(dim, size, step)


def convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    return torch.convolution(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups)


def randint(low, high, shape, *, device, dtype):
    return torch.randint(low, high, shape, device=devices.to_torch_device(device), dtype=dtypes.to_torch_dtype(dtype))


def bernoulli(a):
    return torch.bernoulli(a)


def multinomial(a, num_samples, replacement):
    return torch.multinomial(a, num_samples, replacement)


def index_put(a, indices, values, accumulate):
    return torch.index_put(a, indices, values, accumulate)


def _reduce(fn):
    def impl(a, dims):
        if not dims:
            return a.clone()
        return fn(a, tuple(dims))

    impl.__name__ = fn.__name__
    return impl


def prod(a, dims):
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d)
    return a


def var(a, dims, *, correction):
    return torch.var(a, tuple(dims), correction=correction)


def sort(a, dim, descending, stable):
    return tuple(torch.sort(a, dim=dim, descending=descending, stable=stable))


def iota(length, *, start, step, device, dtype):
    dtype, device = dtypes.to_torch_dtype(dtype), devices.to_torch_device(device)
    return (
        torch.arange(length, device=device, dtype=dtype) * step + start
        if step != 1 or start != 0
        else torch.arange(length, device=device, dtype=dtype)
    )


def uniform(shape, minval, maxval, *, device, dtype):
    dtype, device = dtypes.to_torch_dtype(dtype), devices.to_torch_device(device)
    if minval == 0.0 and maxval == 1.0:
        return torch.rand(shape, device=device, dtype=dtype)
    return torch.empty(shape, device=device, dtype=dtype).uniform_(minval, maxval)


def rng_seed(seed):
    torch.manual_seed(seed)


def rng_get_state(device):
    return torch.get_rng_state() if device == "cpu" else torch.cuda.get_rng_state(device)


def rng_set_state(state, device):
    if device == "cpu":
        torch.set_rng_state(state)
    else:
        torch.cuda.set_rng_state(state, device)


def device_put(a, device):
    return a.to(devices.to_torch_device(device))


def copy_(src, dst):
    # (an inference tensor takes in-place updates under inference_mode only, where the traced code made them;
    # a program's forward and backward run without grad mode already: no context to enter, a CNN's
    # training forward writes back a hundred BatchNorm statistics)
    if dst.is_inference():
        with torch.inference_mode():
            return _copy_into(src, dst)
    if torch.is_grad_enabled():
        with torch.no_grad():
            return _copy_into(src, dst)
    return _copy_into(src, dst)


def _copy_into(src, dst):
    if 0 in dst.stride():
        return _copy_to_each_location_once(src, dst)
    return dst.copy_(src)


def _copy_to_each_location_once(src, dst):
    """The write-back into an expanded tensor (``fill_``/``zero_`` of an expanded input, which eager allows): the
    elements along a 0-stride dim are one memory location, holding one value, written once (PyTorch's
    ``copy_`` refuses to write a location twice)."""
    out = dst
    src = src.expand(dst.shape)
    for d in range(dst.dim()):
        if dst.stride(d) == 0 and dst.shape[d] > 1:
            dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
    dst.copy_(src)
    return out


for _prim, _impl in (
    (prims.convert_element_type, convert_element_type),
    (prims.broadcast_in_dim, broadcast_in_dim),
    (prims.slice, slice_prim),
    (prims.squeeze, squeeze),
    (prims.pad, pad),
    (prims.stride_order, stride_order),
    (prims.take, take),
    (prims.take_along_axis, take_along_axis),
    (prims.scatter_add, scatter_add),
    (prims.div, div_prim),
    (prims.index_put, index_put),
    (prims.scatter, scatter),
    (prims.unfold, unfold),
    (prims.convolution, convolution),
    (prims.randint, randint),
    (prims.bernoulli, bernoulli),
    (prims.multinomial, multinomial),
    (prims.sum, _reduce(torch.sum)),
    (prims.amax, _reduce(torch.amax)),
    (prims.amin, _reduce(torch.amin)),
    (prims.prod, prod),
    (prims.var, var),
    (prims.sort, sort),
    (prims.iota, iota),
    (prims.uniform, uniform),
    (prims.rng_seed, rng_seed),
    (prims.rng_get_state, rng_get_state),
    (prims.rng_set_state, rng_set_state),
    (prims.device_put, device_put),
    (prims.copy_, copy_),
):
    _prim_op(_prim, impl=_impl, name=_impl.__name__ if _impl.__name__ != "impl" else f"prim_{_prim.name}")


@contextmanager
def _no_autocast_ctx():
    with torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
        yield


def no_autocast(fn):
    """Decorator: runs ``fn`` with autocast disabled (traces apply autocast's casts themselves)."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _no_autocast_ctx():
            return fn(*args, **kwargs)

    return wrapper


_register_all_ltorch()
