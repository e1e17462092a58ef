"""dtype and device conversion: ``to``, ``type_as``, ``float()``, ``half()``..."""

from __future__ import annotations

import builtins

import torch

from thunder import clang
from thunder.core import devices, dtypes, prims
from thunder.core.checks import check
from thunder.core.proxies import TensorProxy
from thunder.torch.registry import register_torch_alias, torchsymbol

T = torch.Tensor


def _parse_to(a, args, kwargs):
    device = kwargs.get("device")
    dtype = kwargs.get("dtype")
    for x in args:
        if isinstance(x, (torch.dtype, dtypes.dtype)):  # thunder dtypes too, for transforms working on proxies
            dtype = x
        elif isinstance(x, (str, torch.device, devices.Device)):
            device = x
        elif isinstance(x, builtins.int) and not isinstance(x, builtins.bool):
            device = torch.device("cuda", x)
        elif isinstance(x, TensorProxy):
            device, dtype = x.device, x.dtype
        elif isinstance(x, builtins.bool):
            continue  # non_blocking / copy given positionally
        elif x is not None:
            raise TypeError(f"to() received an invalid combination of arguments: {builtins.type(x).__name__}")
    return device, dtype


@torchsymbol(T.to, method_name="to", grad_args=1)
def to(a, *args, **kwargs):
    device, dtype = _parse_to(a, args, kwargs)
    if device is not None:
        device = devices.to_device(device)
        if device is not a.device:
            a = prims.device_put(a, device)
    if dtype is not None:
        a = clang.maybe_convert_to_dtype(a, dtype)
    if kwargs.get("copy") and a is not None and not args and device is None and dtype is None:
        a = prims.clone(a)
    return a


@torchsymbol(T.type_as, method_name="type_as", grad_args=1)
def type_as(a, other):
    return clang.maybe_convert_to_dtype(a, other.dtype)


def _cast(name, dtype):
    def impl(a, memory_format=torch.preserve_format):
        return clang.maybe_convert_to_dtype(a, dtype)

    impl.__name__ = name
    return torchsymbol(getattr(T, name), method_name=name)(impl)


float = _cast("float", dtypes.float32)
double = _cast("double", dtypes.float64)
half = _cast("half", dtypes.float16)
bfloat16 = _cast("bfloat16", dtypes.bfloat16)
long = _cast("long", dtypes.int64)
int = _cast("int", dtypes.int32)
bool = _cast("bool", dtypes.bool8)
byte = _cast("byte", dtypes.uint8)
short = _cast("short", dtypes.int16)
char = _cast("char", dtypes.int8)


@torchsymbol(T.type, method_name="type")
def type(a, dtype=None, non_blocking=False):
    if dtype is None:
        raise NotImplementedError("Tensor.type() without a dtype returns a string")
    if isinstance(dtype, str) or getattr(dtype, "is_cuda", None) is not None:
        # a legacy tensor type, by name ("torch.cuda.HalfTensor") or class (torch.DoubleTensor): its dtype and device
        cls = dtype
        if isinstance(dtype, str):
            cls = torch
            for part in dtype.split(".")[1:] if dtype.startswith("torch.") else ():
                cls = getattr(cls, part, None)
            check(
                builtins.isinstance(cls, builtins.type)
                and builtins.isinstance(getattr(cls, "dtype", None), torch.dtype),
                lambda: f"invalid type: {dtype!r}",
                exception_type=ValueError,
            )
        out = clang.maybe_convert_to_dtype(a, cls.dtype)
        wants_cuda = builtins.bool(cls.is_cuda)
        if wants_cuda != (a.device.devicetype is devices.DeviceType.CUDA):
            out = to(out, torch.device("cuda" if wants_cuda else "cpu"))
        return out
    return clang.maybe_convert_to_dtype(a, dtype)


def _device_put(device_type):
    def adapter(a, device=None, non_blocking=False, memory_format=None):
        dev = devices.Device(
            device_type if device is None else (f"cuda:{device}" if isinstance(device, builtins.int) else device)
        )
        return to(a, torch.device(str(dev)))

    return adapter


register_torch_alias(T.cpu, _device_put("cpu"))
register_torch_alias(T.cuda, _device_put("cuda"))
