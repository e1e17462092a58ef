"""The result layouts of ops run on ``meta`` (``result_layouts.PendingLayout``), remembered by their arguments' layouts.

PyTorch's meta kernels of elementwise ops and SDPA run through its Python references: about a millisecond per
op on CPU. A model repeats its layers, so the same op meets the same argument layouts again and again (a 4-layer
Llama's RoPE and attention: 4 times each). A meta kernel's result depends on nothing but its arguments' sizes,
strides, storage offsets, dtypes and flags, the Python values beside them, which arguments share a storage and
the default dtype; those make the key, and the answer is the results' sizes, strides and dtypes, from which
``meta`` tensors are made again (a few microseconds). Results that are views (``linear`` of a vector returns a
view of a tensor it made inside, ``hidden_bases.py``) are not remembered: their bases matter. Nothing is
remembered while autocast is on (it changes the results' dtypes).
"""

from __future__ import annotations

import types

import torch

from thunder.tracing.views import _storage_id, _to_shadows, run_on_shadows

__all__ = ["layout_run"]

_LIMIT = 4096  # entries kept (then the memo starts again)
_memo: dict[tuple, object] = {}
_PLAIN = frozenset({int, float, bool, str, complex, type(None), torch.dtype, torch.device, torch.memory_format})


_BUILTINS = (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)


class _Unkeyable(Exception):
    pass


def _key_parts(x, parts: list, storages: dict) -> None:
    t = type(x)
    if t is torch.Tensor:
        index = storages.setdefault(_storage_id(x), len(storages))
        parts.append(
            (tuple(x.shape), x.stride(), x.storage_offset(), x.dtype, x.is_conj(), x.is_neg(), x.device.type, index)
        )
    elif t is tuple or t is list or t is torch.Size:
        parts.append(t)
        for y in x:
            _key_parts(y, parts, storages)
        parts.append(len(x))
    elif t is dict:
        for k in sorted(x):
            parts.append(k)
            _key_parts(x[k], parts, storages)
    elif t in _PLAIN:
        parts.append((t, x))
    elif t is slice:
        parts.append(slice)
        for y in (x.start, x.stop, x.step):
            _key_parts(y, parts, storages)
    elif x is Ellipsis:
        parts.append(x)
    else:
        raise _Unkeyable


def _op_key(func):
    """``func`` where it is PyTorch's (the memo then holds no object of the user's), with the global switches its
    result depends on (SDPA's choice of kernel: ``torch.nn.attention.sdpa_kernel``)."""
    if not getattr(func, "__module__", None) or not func.__module__.startswith("torch"):
        if type(func) not in _BUILTINS:
            raise _Unkeyable
    if getattr(func, "__name__", None) == "scaled_dot_product_attention":
        backends = torch.backends.cuda
        flags = (backends.flash_sdp_enabled(), backends.math_sdp_enabled(), backends.mem_efficient_sdp_enabled())
        return (func, flags, backends.cudnn_sdp_enabled())
    return func


def _answer(out):
    """What is remembered of a meta run's result ``out``; None where it cannot be made again as it was."""
    if type(out) is torch.Tensor:
        return None if out._base is not None else (tuple(out.shape), out.stride(), out.dtype)
    if isinstance(out, (tuple, list)):  # (torch.return_types too)
        items = []
        for o in out:
            if type(o) is torch.Tensor:
                if o._base is not None:
                    return None
                items.append((tuple(o.shape), o.stride(), o.dtype))
            elif type(o) in _PLAIN:
                items.append(("value", o))
            else:
                return None
        return (type(out), tuple(items))
    return None


def _made_again(answer):
    def tensor(entry):
        shape, stride, dtype = entry
        return torch.empty_strided(shape, stride, dtype=dtype, device="meta")

    if type(answer[0]) is tuple:  # (a single tensor: its sizes first)
        return tensor(answer)
    container, items = answer
    return container(tuple(item[1] if item[0] == "value" else tensor(item) for item in items))


def layout_run(func, args, kwargs):
    """``run_on_shadows(func, args, kwargs)`` for an op that never returns a view of its arguments, whose results'
    layouts alone are read: answered from an earlier run on arguments with the same layouts where there is one."""
    if torch._C._is_any_autocast_enabled():
        return run_on_shadows(func, args, kwargs)
    enabled = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)
    try:
        with torch._C.DisableTorchFunction():
            args, kwargs = _to_shadows(args), _to_shadows(kwargs)  # (deferred views resolve here)
            parts: list = [_op_key(func), torch.get_default_dtype()]
            storages: dict = {}
            _key_parts(args, parts, storages)
            _key_parts(kwargs, parts, storages)
            key = tuple(parts)
            answer = _memo.get(key)
            if answer is not None:
                return _made_again(answer)
    except (_Unkeyable, TypeError):  # (an argument with no plain value, or an unhashable one: no memo)
        key = None
    except Exception:
        return None  # (as run_on_shadows: PyTorch cannot make the shadows)
    finally:
        torch._C._set_grad_enabled(enabled)
    out = run_on_shadows(func, args, kwargs)
    if key is not None and out is not None:
        with torch._C.DisableTorchFunction():
            answer = _answer(out)
        if answer is not None:
            if len(_memo) >= _LIMIT:
                _memo.clear()
            _memo[key] = answer
    return out
