"""Devices as thunder sees them: a device type and an index, convertible to and from ``torch.device``."""

from __future__ import annotations

from enum import Enum

import torch

__all__ = ["DeviceType", "Device", "to_device", "to_torch_device", "cpu"]


class DeviceType(Enum):
    CPU = "cpu"
    CUDA = "cuda"
    META = "meta"


_device_types = {t.value: t for t in DeviceType}


class Device:
    """A device: ``Device("cpu")``, ``Device("cuda:0")``. Instances are interned, so ``is`` works."""

    __slots__ = ("devicetype", "index", "_torch_device", "_str")
    _interned: dict[tuple[DeviceType, int | None], Device] = {}

    def __new__(cls, spec: str | Device | torch.device | None = None, index: int | None = None):
        if isinstance(spec, Device):
            return spec
        if isinstance(spec, torch.device):
            type_name, idx = spec.type, spec.index
        elif isinstance(spec, DeviceType):
            type_name, idx = spec.value, index
        elif isinstance(spec, str):
            type_name, _, idx_str = spec.partition(":")
            idx = int(idx_str) if idx_str else index
        else:
            raise TypeError(f"cannot make a device from {spec!r}")
        devicetype = _device_types.get(type_name)
        if devicetype is None:
            raise NotImplementedError(f"thunder does not support the device type {type_name!r}")
        if devicetype is DeviceType.CUDA and idx is None:
            idx = torch.cuda.current_device() if torch.cuda.is_available() else 0
        if devicetype is not DeviceType.CUDA:
            idx = None
        key = (devicetype, idx)
        dev = cls._interned.get(key)
        if dev is None:
            dev = object.__new__(cls)
            dev.devicetype = devicetype
            dev.index = idx
            dev._str = devicetype.value if idx is None else f"{devicetype.value}:{idx}"
            dev._torch_device = torch.device(dev._str)
            cls._interned[key] = dev
        return dev

    @property
    def type(self) -> str:
        return self.devicetype.value

    def __repr__(self) -> str:
        return f'devices.Device("{self._str}")'

    def __str__(self) -> str:
        return self._str

    def __reduce__(self):
        return (Device, (self._str,))


def to_device(x) -> Device | None:
    """A thunder ``Device`` from a string, ``torch.device``, tensor, proxy or ``Device``."""
    if x is None or isinstance(x, Device):
        return x
    if isinstance(x, (str, torch.device)):
        return Device(x)
    if isinstance(x, int):
        return Device("cuda", x)
    d = getattr(x, "device", None)
    if d is not None:
        return to_device(d)
    raise TypeError(f"cannot interpret {x!r} as a device")


def to_torch_device(x) -> torch.device | None:
    if x is None or isinstance(x, torch.device):
        return x
    return to_device(x)._torch_device


cpu = Device("cpu")
