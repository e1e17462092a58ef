"""Tensor factories. Every factory records an explicit ``device`` and ``dtype``."""

from __future__ import annotations

from numbers import Number

import torch

from thunder import clang
from thunder.core import devices, dtypes, prims
from thunder.core.checks import check
from thunder.core.proxies import TensorProxy
from thunder.torch.registry import InplaceOp, register_torch_alias, torchsymbol

T = torch.Tensor


def _default_device():
    return torch.get_default_device()


def _fill_dtype(value) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, (int, torch.SymInt)):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex64
    return torch.get_default_dtype()


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = size[0]
    return tuple(s if type(s) is torch.SymInt else int(s) for s in size)


@torchsymbol(name="full", method_name=None)
def full(shape, fill_value, *, device: torch.device, dtype: torch.dtype):
    return clang.full(shape, fill_value, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


def _canonical(device, dtype, default_dtype):
    device = torch.device(device) if device is not None else _default_device()
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return device, dtype if dtype is not None else default_dtype


def _factory(fill):
    def adapter(
        *size, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False, out=None, memory_format=None
    ):
        check(out is None, "out= is not supported", NotImplementedError)
        device, dtype = _canonical(device, dtype, torch.get_default_dtype())
        return full(_shape(size), fill, device=device, dtype=dtype)

    adapter.grad_args = 0  # (a new tensor: no gradient from ``a``, whatever it requires)
    return adapter


register_torch_alias(torch.zeros, _factory(0))
register_torch_alias(torch.ones, _factory(1))
register_torch_alias(torch.empty, _factory(0))


def _full_adapter(
    size, fill_value, *, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False, out=None
):
    check(out is None, "out= is not supported", NotImplementedError)
    check(
        not isinstance(fill_value, TensorProxy), "full with a tensor fill value is not supported", NotImplementedError
    )
    device, dtype = _canonical(device, dtype, _fill_dtype(fill_value))
    return full(tuple(size), fill_value, device=device, dtype=dtype)


register_torch_alias(torch.full, _full_adapter)


def _like(fill):
    def adapter(a, *, dtype=None, device=None, layout=None, requires_grad=False, memory_format=None, pin_memory=False):
        device = device if device is not None else devices.to_torch_device(a.device)
        dtype = dtype if dtype is not None else dtypes.to_torch_dtype(a.dtype)
        return full(a.shape, fill if fill is not None else 0, device=torch.device(device), dtype=dtype)

    adapter.grad_args = 0  # (a new tensor: no gradient from ``a``, whatever it requires)
    return adapter


register_torch_alias(torch.zeros_like, _like(0))
register_torch_alias(torch.ones_like, _like(1))
register_torch_alias(torch.empty_like, _like(0))


def _full_like(
    a, fill_value, *, dtype=None, device=None, layout=None, requires_grad=False, memory_format=None, pin_memory=False
):
    return _like(fill_value)(a, dtype=dtype, device=device)


_full_like.grad_args = 0
register_torch_alias(torch.full_like, _full_like)


def _new(fill):
    def adapter(a, *sizes, size=None, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False):
        size = sizes if size is None else (size,)  # x.new_ones(2, 3), x.new_ones((2, 3)) or x.new_ones(size=(2, 3))
        device = devices.to_torch_device(device if device is not None else a.device)
        dtype = dtype if dtype is not None else dtypes.to_torch_dtype(a.dtype)
        return full(_shape(size), fill, device=device, dtype=dtype)

    adapter.grad_args = 0  # (a new tensor: no gradient from ``a``, whatever it requires)
    return adapter


register_torch_alias(T.new_zeros, _new(0))
register_torch_alias(T.new_ones, _new(1))
register_torch_alias(T.new_empty, _new(0))


def _new_full(a, size, fill_value, *, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False):
    return _new(fill_value)(a, tuple(size), dtype=dtype, device=device)


_new_full.grad_args = 0
register_torch_alias(T.new_full, _new_full)


@torchsymbol(name="arange")
def arange(start: Number, end: Number, step: Number = 1, *, device: torch.device, dtype: torch.dtype):
    return clang.arange(start, end, step, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


def _arange_adapter(
    start, end=None, step=1, *, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False, out=None
):
    if end is None:
        start, end = 0, start
    is_float = any(isinstance(x, float) for x in (start, end, step))
    device, dtype = _canonical(device, dtype, torch.get_default_dtype() if is_float else torch.int64)
    return arange(start, end, step, device=device, dtype=dtype)


register_torch_alias(torch.arange, _arange_adapter)


@torchsymbol(name="randn", tags=("random",))
def randn(shape, *, device: torch.device, dtype: torch.dtype):
    return prims.randn(tuple(shape), device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


@torchsymbol(name="rand", tags=("random",))
def rand(shape, *, device: torch.device, dtype: torch.dtype):
    return prims.uniform(tuple(shape), 0.0, 1.0, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


def _random_adapter(sym):
    def adapter(
        *size, generator=None, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False, out=None
    ):
        check(generator is None, "a custom generator is not supported", NotImplementedError)
        device, dtype = _canonical(device, dtype, torch.get_default_dtype())
        return sym(_shape(size), device=device, dtype=dtype)

    return adapter


register_torch_alias(torch.randn, _random_adapter(randn))
register_torch_alias(torch.rand, _random_adapter(rand))


def _random_like(sym):
    def adapter(a, *, dtype=None, device=None, layout=None, requires_grad=False, memory_format=None):
        return sym(
            a.shape,
            device=devices.to_torch_device(device if device is not None else a.device),
            dtype=dtype if dtype is not None else dtypes.to_torch_dtype(a.dtype),
        )

    return adapter


register_torch_alias(torch.randn_like, _random_like(randn))
register_torch_alias(torch.rand_like, _random_like(rand))


# ---------------------------------------------------------------- more factories


@torchsymbol(name="linspace")
def linspace(start: Number, end: Number, steps: int, *, device: torch.device, dtype: torch.dtype):
    check(steps >= 0, "linspace(): number of steps must be non-negative", RuntimeError)
    dev, dt = devices.to_device(device), dtypes.to_dtype(dtype)
    if steps == 0:
        return prims.full((0,), 0, device=dev, dtype=dt)
    if steps == 1:
        return prims.full((1,), start, device=dev, dtype=dt)
    comp = dtypes.float64 if dt is dtypes.float64 or not dtypes.is_float_dtype(dt) else dtypes.float32
    step = (end - start) / (steps - 1)
    i = prims.iota(steps, start=0, step=1, device=dev, dtype=comp)
    # as PyTorch: the first half counts up from start, the second half down from end
    up = clang.add(clang.mul(i, step), start)
    down = clang.sub(end, clang.mul(clang.sub(steps - 1, i), step))
    out = clang.where(clang.elementwise_binary(i, steps // 2, prims.lt), up, down)
    return clang.maybe_convert_to_dtype(out, dt)


def _linspace_adapter(
    start, end, steps, *, out=None, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False
):
    check(out is None, "out= is not supported", NotImplementedError)
    check(not isinstance(start, TensorProxy) and not isinstance(end, TensorProxy), "tensor bounds", NotImplementedError)
    device, dtype = _canonical(device, dtype, torch.get_default_dtype())
    return linspace(start, end, steps, device=device, dtype=dtype)


register_torch_alias(torch.linspace, _linspace_adapter)


@torchsymbol(name="eye")
def eye(n: int, m: int, *, device: torch.device, dtype: torch.dtype):
    check(n >= 0, lambda: f"n must be greater or equal to 0, got {n}", RuntimeError)
    check(m >= 0, lambda: f"m must be greater or equal to 0, got {m}", RuntimeError)
    dev = devices.to_device(device)
    r = prims.broadcast_in_dim(prims.iota(n, start=0, step=1, device=dev, dtype=dtypes.int64), (n, m), (0,))
    c = prims.broadcast_in_dim(prims.iota(m, start=0, step=1, device=dev, dtype=dtypes.int64), (n, m), (1,))
    return clang.maybe_convert_to_dtype(prims.eq(r, c), dtype)


def _eye_adapter(n, m=None, *, out=None, dtype=None, layout=None, device=None, pin_memory=False, requires_grad=False):
    check(out is None, "out= is not supported", NotImplementedError)
    device, dtype = _canonical(device, dtype, torch.get_default_dtype())
    return eye(n, n if m is None else m, device=device, dtype=dtype)


register_torch_alias(torch.eye, _eye_adapter)


def _flatten_literal(data, shape: list, depth: int = 0) -> list:
    if isinstance(data, (list, tuple)):
        if len(shape) <= depth:
            shape.append(len(data))
        check(shape[depth] == len(data), "expected a rectangular nested sequence", ValueError)
        out = []
        for x in data:
            out.extend(_flatten_literal(x, shape, depth + 1))
        return out
    check(
        isinstance(data, Number) or type(data) in (torch.SymInt, torch.SymFloat),
        "tensor literals with tensors inside have no symbol",
        NotImplementedError,
    )
    return [data]


@torchsymbol(name="tensor")
def tensor(data, *, device: torch.device, dtype: torch.dtype):
    """A tensor literal (``torch.tensor([[1, 2], [3, 4]])``): a constant of the program."""
    shape: list = []
    flat = _flatten_literal(data, shape)
    dev, dt = devices.to_device(device), dtypes.to_dtype(dtype)
    if not shape:
        return prims.full((), flat[0], device=dev, dtype=dt)
    if not flat:
        return prims.full(tuple(shape), 0, device=dev, dtype=dt)
    parts = [prims.full((1,), v, device=dev, dtype=dt) for v in flat]
    out = parts[0] if len(parts) == 1 else prims.cat(parts, 0)
    return clang.reshape(out, tuple(shape))


def _literal_dtype(flat) -> torch.dtype:
    if any(isinstance(v, complex) for v in flat):
        return torch.complex64
    if any(isinstance(v, (float, torch.SymFloat)) for v in flat):
        return torch.get_default_dtype()
    if flat and all(isinstance(v, bool) for v in flat):
        return torch.bool
    return torch.int64


def _tensor_adapter(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    flat = _flatten_literal(data, [])
    device, dtype = _canonical(device, dtype, _literal_dtype(flat))
    return tensor(data, device=device, dtype=dtype)


register_torch_alias(torch.tensor, _tensor_adapter)
register_torch_alias(torch.as_tensor, _tensor_adapter)


# ---------------------------------------------------------------- random numbers
# The torch executor runs the same torch calls in the same order as eager, so with the same
# torch.manual_seed a compiled program draws the same numbers.


@torchsymbol(name="randint", tags=("random",))
def randint(low: int, high: int, shape, *, device: torch.device, dtype: torch.dtype):
    return prims.randint(low, high, tuple(shape), device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


def _randint_adapter(*args, generator=None, dtype=None, device=None, layout=None, requires_grad=False, out=None):
    check(generator is None and out is None, "randint with a generator or out=", NotImplementedError)
    if len(args) == 2:
        low, (high, size) = 0, args
    else:
        low, high, size = args
    device, dtype = _canonical(device, dtype, torch.int64)
    return randint(low, high, tuple(size), device=device, dtype=dtype)


register_torch_alias(torch.randint, _randint_adapter)


def _randint_like_adapter(a, low_or_high, high=None, *, dtype=None, device=None, layout=None, memory_format=None):
    low, high = (0, low_or_high) if high is None else (low_or_high, high)
    device = devices.to_torch_device(device if device is not None else a.device)
    dtype = dtype if dtype is not None else dtypes.to_torch_dtype(a.dtype)
    return randint(low, high, a.shape, device=device, dtype=dtype)


register_torch_alias(torch.randint_like, _randint_like_adapter)


@torchsymbol(torch.bernoulli, T.bernoulli, method_name="bernoulli", tags=("random",))
def bernoulli(a, *, generator=None):
    check(generator is None, "a custom generator is not supported", NotImplementedError)
    return prims.bernoulli(a)


@torchsymbol(torch.multinomial, T.multinomial, method_name="multinomial", tags=("random",))
def multinomial(a, num_samples: int, replacement: bool = False, *, generator=None):
    check(generator is None, "a custom generator is not supported", NotImplementedError)
    return prims.multinomial(a, num_samples, replacement)


@torchsymbol(name="normal", tags=("random",))
def normal(mean: float, std: float, shape, *, device: torch.device, dtype: torch.dtype):
    """Normal samples of ``shape`` (``Tensor.normal_``'s draws)."""
    check(std >= 0.0, lambda: f"normal expects std >= 0.0, but found std {std}", RuntimeError)
    z = prims.randn(tuple(shape), device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))
    if std != 1.0:
        z = clang.mul(z, std)
    if mean != 0.0:
        z = clang.add(z, mean)
    return z


def _uniform_(a, from_=0.0, to=1.0, *, generator=None, **kwargs):
    check(generator is None, "a custom generator is not supported", NotImplementedError)
    from_ = kwargs.get("from", from_)
    return prims.uniform(a.shape, from_, to, device=a.device, dtype=a.dtype)


def _normal_(a, mean=0.0, std=1.0, *, generator=None):
    check(generator is None, "a custom generator is not supported", NotImplementedError)
    return normal(mean, std, a.shape, device=devices.to_torch_device(a.device), dtype=dtypes.to_torch_dtype(a.dtype))


register_torch_alias(T.uniform_, InplaceOp(_uniform_))
register_torch_alias(T.normal_, InplaceOp(_normal_))


# ---------------------------------------------------------------- in-place fills and copies


# fill and zero are symbols taking ``a`` (not bare ``full``s), so that, as in eager, their result requires grad
# when ``a`` does (with a zero gradient)
@torchsymbol(name="zero")
def zero(a):
    return prims.full(a.shape, 0, device=a.device, dtype=a.dtype)


@torchsymbol(name="fill")
def fill(a, value):
    if isinstance(value, TensorProxy):
        check(
            value.ndim == 0,
            lambda: f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.",
        )
        return clang.expand(clang.maybe_convert_to_dtype(value, a.dtype), a.shape)
    return prims.full(a.shape, value, device=a.device, dtype=a.dtype)


@torchsymbol(name="copy")
def copy(a, src, non_blocking: bool = False):
    """The value ``a.copy_(src)`` gives ``a``: ``src`` broadcast and converted to ``a``'s dtype and device."""
    if not isinstance(src, TensorProxy):  # x.copy_(1.5): a Python number fills
        return fill(a, src)
    if src.device is not a.device:
        src = prims.device_put(src, a.device)
    values = clang.maybe_convert_to_dtype(src, a.dtype)
    if values is src:
        # a's elements are its own in eager, not src's: without the copy, a's new value would be src (or a view of
        # it), and a returned a would share src's memory
        values = prims.clone(src)
    return clang.expand(values, a.shape)


register_torch_alias(T.zero_, InplaceOp(zero))
register_torch_alias(torch.zero_, InplaceOp(zero))
register_torch_alias(T.fill_, InplaceOp(fill))
register_torch_alias(torch.fill_, InplaceOp(fill))
register_torch_alias(T.copy_, InplaceOp(copy))
register_torch_alias(torch.fill, fill)
