"""The ``apex`` operator executor object, and the device check its checkers share."""

from __future__ import annotations

from thunder.core.devices import DeviceType
from thunder.core.proxies import TensorProxy
from thunder.extend import OperatorExecutor
from thunder_apex import runtime

__all__ = ["ApexExecutor", "apex_ex", "SUPPORTED_DEVICE_TYPES"]

#: Device types whose tensors the apex checkers accept. apex's kernels are CUDA-only, so this is
#: ``{DeviceType.CUDA}``. Test hook: the package's CPU tests add ``DeviceType.CPU`` (with
#: ``pytest``'s ``monkeypatch``) while a PyTorch stand-in for apex is installed in ``sys.modules``,
#: so that the executor's wiring runs on CPU tensors. Never change it outside such a test.
SUPPORTED_DEVICE_TYPES: set[DeviceType] = {DeviceType.CUDA}


class ApexExecutor(OperatorExecutor):
    """An :class:`~thunder.extend.OperatorExecutor` whose ``unavailable_reason()`` reports apex's state."""

    def unavailable_reason(self) -> str | None:
        """``"apex not installed"``, ``"apex built without xentropy"``, or ``None`` when apex can run."""
        return runtime.unavailable_reason()


#: the ``apex`` executor: ``thunder.jit(fn, executors=[apex_ex])``
apex_ex = ApexExecutor("apex", version="0.1.0", priority=20)


def on_supported_devices(*tensors: TensorProxy | None) -> bool:
    """Whether every given tensor (``None`` skipped) is a :class:`TensorProxy` on one supported device."""
    present = [t for t in tensors if t is not None]
    if not present or not all(isinstance(t, TensorProxy) for t in present):
        return False
    device = present[0].device
    return device.devicetype in SUPPORTED_DEVICE_TYPES and all(t.device == device for t in present)
