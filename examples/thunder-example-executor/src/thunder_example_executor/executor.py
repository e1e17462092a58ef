"""The ``example`` operator executor: what a plugin registers on its executor.

- ``example_fma(a, b, c)``: a new operator (``a * b + c`` in one ``torch.addcmul`` call), with a
  ``like=`` description, so Thunder knows its metadata and can differentiate it;
- ``example_mul(a, b)``: an operator that runs ``torch.mul``, registered as the implementation of
  ``ltorch.mul`` for CPU tensors of one shape and dtype (the checker), so ``a * b`` in any program
  jitted with this executor runs it.
"""

from __future__ import annotations

import torch

import thunder.torch as ltorch
from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.extend import OperatorExecutor
from thunder_example_executor import __version__

__all__ = ["example_ex", "example_fma", "example_mul"]

example_ex = OperatorExecutor("example", version=__version__, priority=10)


def _fma_impl(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return torch.addcmul(c, a, b)


def _fma_like(a: TensorProxy, b: TensorProxy, c: TensorProxy) -> TensorProxy:
    return a * b + c


example_fma = example_ex.register_operator("example_fma", like=_fma_like, fn=_fma_impl)


def _mul_impl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mul(a, b)


def _mul_meta(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    return TensorProxy(like=a)


example_mul = example_ex.register_operator("example_mul", meta=_mul_meta, fn=_mul_impl)


def _mul_checker(a, b) -> bool:
    return (
        isinstance(a, TensorProxy)
        and isinstance(b, TensorProxy)
        and a.device.devicetype is DeviceType.CPU
        and a.device is b.device
        and a.shape == b.shape
        and a.dtype is b.dtype
    )


example_ex.register_implementation(ltorch.mul, example_mul, checker=_mul_checker)
