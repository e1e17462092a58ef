"""The ``nvfuser`` fusion executor: regions of prims compiled by nvFuser.

In the claiming pass the executor takes every bound symbol whose prims nvFuser supports for CUDA
tensors (:mod:`thunder_nvfuser.lowering` has the list and the checkers; a torch-language symbol
is taken whole when its whole decomposition is). Thunder's shared partitioner
(:mod:`thunder.executors.fusion`) groups the claims into acyclic regions; each region becomes
one :class:`NvFusion` call, printed in the trace as ``nvFusion0(...)`` with the region's
contents as comments below it.

An :class:`NvFusion` builds one ``nvfuser_direct.FusionDefinition`` per input signature (dtypes, ranks,
which dims are size 1, contiguity and stride order of the tensors; the types of the scalars) the
first time it sees it, keeps it, and executes it. nvFuser itself compiles a kernel per concrete
shape on first execution (the definition's ``FusionExecutorCache``) and caches it, so the
per-signature dictionary plays the part of nvFuser's ``LruFusionCache``. Nothing is imported from
nvFuser until a fusion first runs; then the nvFuser and torch versions are checked
(:func:`thunder_nvfuser.runtime.check_versions`) and ``nvfuser_direct`` is imported (the legacy
``nvfuser`` module of older wheels when it is absent: the lowering only uses calls both have).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from thunder.core.devices import DeviceType
from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.extend import FusionExecutor, is_cheap_to_recompute, rematerialize_forward_backward
from thunder_nvfuser import __version__, runtime
from thunder_nvfuser.lowering import LOWERINGS, contiguous_descriptor, lower_region

__all__ = ["NvFuserExecutor", "NvFusion", "nvfuser_ex", "OPTIONS"]

OPTIONS = ("random", "matmul", "linear")
"""Executor options: ``random`` (uniform and normal draws in fusions; on by default), ``matmul`` and
``linear`` (nvFuser's matmul and linear; off by default, PyTorch's cuBLAS calls are used)."""

# operations nvFuser never takes: side effects (their order matters), opaque fallbacks
_EXCLUDED_TAGS = (OpTags.DONT_DCE, OpTags.IN_PLACE, "opaque")


class NvFuserExecutor(FusionExecutor):
    """A fusion executor lowering regions of prims on CUDA tensors to nvFuser ``FusionDefinition`` s.

    Args:
        name: the executor's name (``thunder.jit(fn, executors=[name, ...])``).
        options: which optional families it takes, among :data:`OPTIONS` (default: ``("random",)``).
        priority: its place in ``thunder.discover()`` (higher first).
        rematerialize: recompute cheap fusible forward values in the backward instead of saving
            them (:meth:`rematerialize`; on by default).
    """

    region_name = "nvFusion"

    def __init__(
        self,
        name: str = "nvfuser",
        *,
        options: Iterable[str] = ("random",),
        priority: int = 20,
        rematerialize: bool = True,
    ):
        super().__init__(name, version=__version__, priority=priority)
        self.rematerialize_saved = rematerialize
        options = tuple(options)
        unknown = [o for o in options if o not in OPTIONS]
        if unknown:
            raise ValueError(f"unknown nvfuser executor options {unknown}; choose from {list(OPTIONS)}")
        self.options = frozenset(options)

    def unavailable_reason(self) -> str | None:
        return runtime.unavailable_reason()

    def can_fuse(self, bsym: BoundSymbol) -> bool:
        """Whether nvFuser takes ``bsym``: a supported prim whose checker accepts, or a composite of those."""
        sym = bsym.sym
        if sym.python_printer is not None or any(tag in sym.tags for tag in _EXCLUDED_TAGS):
            return False
        lowering = LOWERINGS.get(sym.id)
        if lowering is not None:
            if lowering.option is not None and lowering.option not in self.options:
                return False
            try:
                return bool(lowering.checker(*bsym.args, **bsym.kwargs))
            except TypeError:  # a call with an unexpected signature: not ours
                return False
        subs = bsym.subsymbols
        return bool(subs) and all(self.can_fuse(s) for s in subs)

    def can_recompute(self, bsym: BoundSymbol) -> bool:
        """Whether the backward may recompute ``bsym``: nvFuser fuses it and it is elementwise or reshaping work."""
        return self.can_fuse(bsym) and is_cheap_to_recompute(bsym)

    def rematerialize(self, forward, backward):
        """Saves for backward only what cannot be cheaply recomputed in the backward's fusions.

        With the minimum cut of :func:`thunder.extend.rematerialize_forward_backward` over the
        operations :meth:`can_recompute` accepts: e.g. an MLP's ``silu(fc1) * fc2`` saves ``fc1``
        and ``fc2`` (the matmul outputs) and the backward's fusion recomputes the rest, as
        lightning-thunder does with nvFuser.
        """
        if not self.rematerialize_saved:
            return forward, backward
        return rematerialize_forward_backward(forward, backward, self.can_recompute)

    def fuse_region(self, region) -> Callable:
        """The callable running ``region`` through nvFuser (built lazily, per input signature)."""
        return NvFusion(region)


def _layout(t: torch.Tensor) -> tuple:
    """What the ``FusionDefinition`` depends on in a tensor's layout: its size-1 dims, stride order, contiguity.

    Shapes themselves are left out: the definition is symbolic in them (nvFuser specialises its
    kernels per shape in its own cache).
    """
    sizes, strides = t.shape, t.stride()
    dims = [i for i in range(t.ndim) if sizes[i] != 1 and strides[i] != 0]
    order = sorted(dims, key=lambda i: (-strides[i], -i))  # outermost first
    contiguous = []
    for k, i in enumerate(order):
        inner = order[k + 1] if k + 1 < len(order) else None
        expected = 1 if inner is None else strides[inner] * sizes[inner]
        contiguous.append(strides[i] == expected)
    return tuple(s == 1 for s in sizes), tuple(s == 0 for s in strides), tuple(order), tuple(contiguous)


def _signature(args: tuple) -> tuple:
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, a.device, _layout(a)))
        else:
            key.append(type(a))
    return tuple(key)


class NvFusion:
    """One region as a callable: ``outputs = fusion(*inputs)``, executed by nvFuser.

    Attributes:
        region: the :class:`thunder.executors.fusion.Region` it runs.
        fusions: the ``FusionDefinition`` built for each input signature seen so far.
    """

    def __init__(self, region):
        self.region = region
        self.__name__ = self.__qualname__ = region.name
        self.fusions: dict[tuple, Any] = {}
        self._nvfuser = None
        devices = {
            p.device.index
            for b in region.bound_symbols
            for p in b.flat_outs
            if isinstance(p, TensorProxy) and p.device.devicetype is DeviceType.CUDA
        }
        # used when no input tensor tells nvFuser where to run (a region of factories only)
        self.device_index = min(devices) if devices else 0

    def __repr__(self) -> str:
        return f"<NvFusion {self.region.name}: {len(self.region.bound_symbols)} bound symbols>"

    def _module(self):
        if self._nvfuser is None:
            runtime.check_versions()
            self._nvfuser = runtime.import_nvfuser()
        return self._nvfuser

    def fusion_definition(self, *args) -> Any:
        """The nvFuser ``FusionDefinition`` for these inputs (built on first use)."""
        key = _signature(args)
        fd = self.fusions.get(key)
        if fd is None:
            nv = self._module()
            descriptors = []
            for a in args:
                if isinstance(a, torch.Tensor):
                    describe = getattr(nv, "compute_tensor_descriptor", None)
                    if describe is not None:
                        descriptors.append(describe(list(a.shape), list(a.stride())))
                    else:  # pragma: no cover - nvFuser builds without it
                        descriptors.append(contiguous_descriptor(a.shape))
                else:
                    descriptors.append(None)
            fd = nv.FusionDefinition()
            with fd:
                lower_region(fd, self.region, nv.DataType, descriptors)
            self.fusions[key] = fd
        return fd

    def __call__(self, *args):
        fd = self.fusion_definition(*args)
        has_tensor = any(isinstance(a, torch.Tensor) for a in args)
        outs = fd.execute(list(args), device=None if has_tensor else self.device_index)
        return tuple(outs)


nvfuser_ex = NvFuserExecutor()
"""The nvFuser executor (options: random draws fused; matmul and linear left to PyTorch)."""
