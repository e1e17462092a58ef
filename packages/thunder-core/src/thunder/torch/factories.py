"""Tensor factories. Every factory records an explicit ``device`` and ``dtype``."""

from __future__ import annotations

from numbers import Number

import torch

from thunder import clang
from thunder.core import devices, dtypes, prims
from thunder.core.checks import check
from thunder.core.proxies import TensorProxy
from thunder.torch.registry import register_torch_alias, torchsymbol

T = torch.Tensor


def _default_device():
    return torch.get_default_device()


def _fill_dtype(value) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if isinstance(value, complex):
        return torch.complex64
    return torch.get_default_dtype()


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = size[0]
    return tuple(int(s) for s in size)


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

    return adapter


register_torch_alias(torch.zeros_like, _like(0))
register_torch_alias(torch.ones_like, _like(1))
register_torch_alias(torch.empty_like, _like(0))


def _full_like(
    a, fill_value, *, dtype=None, device=None, layout=None, requires_grad=False, memory_format=None, pin_memory=False
):
    return _like(fill_value)(a, dtype=dtype, device=device)


register_torch_alias(torch.full_like, _full_like)


def _new(fill):
    def adapter(a, *size, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False):
        device = devices.to_torch_device(device if device is not None else a.device)
        dtype = dtype if dtype is not None else dtypes.to_torch_dtype(a.dtype)
        return full(_shape(size), fill, device=device, dtype=dtype)

    return adapter


register_torch_alias(T.new_zeros, _new(0))
register_torch_alias(T.new_ones, _new(1))
register_torch_alias(T.new_empty, _new(0))


def _new_full(a, size, fill_value, *, dtype=None, device=None, layout=None, requires_grad=False, pin_memory=False):
    return _new(fill_value)(a, tuple(size), dtype=dtype, device=device)


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
