"""Eager's refusal of ``x.view(shape)`` where ``x``'s strides cannot be viewed so.

``x.transpose(0, 1).view(-1)`` raises in eager ("view size is not compatible with input tensor's size and stride"):
a view needs the new shape to be expressible over the old strides. The program computes a view's elements whatever
its argument's layout (``view_values``), and the tracer makes a view's shadow only when something asks for it, so
without this check the compiled program would return a tensor where eager raises. The tracer asks it of each
``view`` whose argument is not known to be contiguous (a contiguous tensor takes every shape of its size): the view
is made on the argument's shadow, eager's layout, and eager's error raised where it fails. On CPU only: on CUDA the
shadow of an attention's result has the math kernel's layout where eager runs a fused kernel (``attention_kernels``
answers for CPU), so a refusal there could be thunder's alone.
"""

from __future__ import annotations

import torch

from thunder.tracing.errors import describe_location, user_frame
from thunder.tracing.result_layouts import _layout_kind
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import shadow

__all__ = ["refuse_view_eager_refuses"]


def _plain(x) -> bool:
    if type(x) is int:
        return True
    return type(x) in (tuple, list, torch.Size) and all(type(y) is int for y in x)


def refuse_view_eager_refuses(args, kwargs) -> None:
    """Raises eager's RuntimeError for ``Tensor.view(*args, **kwargs)`` where the argument's layout refuses the
    shape (sizes known as numbers; a ``view(dtype)`` is another question)."""
    if not args or type(args[0]) is not TracingTensor or args[0].device.type != "cpu":
        return  # (on CUDA an attention's shadow has the meta kernel's layout, not the fused kernel's: not trusted)
    shape = (*args[1:], *kwargs.values())
    if not shape or not all(_plain(s) for s in shape):
        return
    with torch._C.DisableTorchFunction():
        if not _layout_kind(args[0]):
            return
    m = shadow(args[0])
    with torch._C.DisableTorchFunction():
        try:
            m.view(*args[1:], **kwargs)
        except RuntimeError as e:
            e.add_note(f"(raised while thunder traced Tensor.view at {describe_location(user_frame(2))})")
            e._thunder_noted = True
            raise
