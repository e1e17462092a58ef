"""Every OpInfo's traced metadata agrees with PyTorch: the shape and dtype a symbol's meta function
gives its outputs (what the rest of the trace reads) are eager's, and so are the strides of results
that are views of an input (what ``stride()``/``is_contiguous()`` answer inside traced code).

The value tests (test_ops.py) compare executed results, which come from PyTorch whatever the trace
believed; this one compares the trace's own beliefs.
"""

from __future__ import annotations

import pytest
import torch
from opinfos import TESTED_DTYPES, OpInfo, opinfos

import thunder


def _dtypes(op: OpInfo):
    tested = [d for d in op.dtypes if d in TESTED_DTYPES and d not in op.skips]
    # one of each kind is enough to exercise the dtype rules
    picked = []
    for kind in (lambda d: d.is_floating_point, lambda d: d == torch.bool, lambda d: not d.is_floating_point):
        for d in tested:
            if kind(d) and d not in picked and not d.is_complex:
                picked.append(d)
                break
    return picked


def _cases():
    for op in opinfos:
        for dtype in _dtypes(op):
            yield pytest.param(op, dtype, id=f"{op.name}-{str(dtype).replace('torch.', '')}")


def _clone_layout(a: torch.Tensor) -> torch.Tensor:
    """A copy of ``a`` with its own storage and the same sizes, strides and storage offset."""
    storage = a.detach().untyped_storage().clone()
    return torch.empty(0, dtype=a.dtype).set_(storage, a.storage_offset(), a.shape, a.stride())


def _storage_ptrs(x) -> set:
    if isinstance(x, torch.Tensor):
        return {x.untyped_storage().data_ptr()} if x.numel() else set()
    if isinstance(x, (tuple, list)):
        return set().union(*(_storage_ptrs(y) for y in x)) if x else set()
    if isinstance(x, dict):
        return _storage_ptrs(list(x.values()))
    return set()


def _describe(x, input_ptrs, *, traced: bool):
    """Shape and dtype of every tensor in ``x``; strides too for eager views of an input."""
    if isinstance(x, torch.Tensor):
        is_view = not traced and x.numel() > 0 and x.untyped_storage().data_ptr() in input_ptrs
        return ("tensor", tuple(x.shape), x.dtype, tuple(x.stride()) if is_view or traced else None)
    if isinstance(x, (tuple, list)):
        return tuple(_describe(y, input_ptrs, traced=traced) for y in x)
    return None


def _agree(traced, eager) -> bool:
    if isinstance(eager, tuple) and eager and eager[0] == "tensor":
        _, shape, dtype, strides = eager
        return traced[1] == shape and traced[2] == dtype and (strides is None or traced[3] == strides)
    if isinstance(eager, tuple):
        return isinstance(traced, tuple) and len(traced) == len(eager) and all(map(_agree, traced, eager))
    return True


@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_traced_metadata_matches_eager(op: OpInfo, dtype: torch.dtype) -> None:
    def program(*args, **kwargs):
        out = op.op(*args, **kwargs)
        return _describe(out, set(), traced=True)  # read inside the trace: the traced metadata

    n = 0
    for sample in op.sample_inputs("cpu", dtype):
        if op.random or n == 4:  # a few samples per dtype keep this quick; test_ops runs them all
            break
        n += 1
        eager_args = [_clone_layout(a) if isinstance(a, torch.Tensor) else a for a in sample.args]
        expected = op.torch_reference(*eager_args, **sample.kwargs)
        if isinstance(expected, torch.Size):
            continue
        eager = _describe(expected, _storage_ptrs(eager_args), traced=False)
        traced = thunder.jit(program)(*sample.args, **sample.kwargs)
        assert _agree(traced, eager), f"{sample}: traced {traced}, eager {eager}"
    assert n > 0 or op.random
