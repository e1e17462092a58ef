"""Channels-last convolution chains: where a network's grouped convolutions run faster in PyTorch's channels-last
memory format, the program converts their inputs to it and lets PyTorch's kernels keep it.

On the CPU, PyTorch's (oneDNN's) grouped and depthwise convolutions are much faster on channels-last tensors than
on contiguous ones, forward and backward, while dense convolutions are slower: one thread, the training step
(forward and backward) of a model fed a channels-last input against the same model fed a contiguous one, both
under ``thunder.jit``: MobileNetV2 0.68 against 0.92 of eager's contiguous step, RegNetY 0.69 against 0.91,
torchvision's RegNetY-400MF 0.64 against 0.96, ResNet-18 2.22 against 1.00 (``benchmarks/vision.py`` models,
batch 2, process CPU time). Inductor runs every CPU convolution graph in channels-last, which is why
``torch.compile`` wins on the grouped networks (MobileNetV2 0.74) and loses on ResNet-18 (1.86).

But their float32 sums run in another order, and single-threaded, PyTorch's channels-last weight and BatchNorm
gradients are far less accurate where a gradient cancels to a small result: MobileNetV2's stem weight gradient
(largest entry 1027) is 20 away from the float64 one in channels-last, 0.12 contiguous (one thread; 0.18 and 0.10
with two). ``torch.compile`` accepts that; the default executors keep eager's layout and so eager's numbers.

Pointwise (1x1, ungrouped) convolutions are faster in channels-last too: 0.48-0.76 of their contiguous forward and
backward on this sweep's models (one thread, batch 2), while ResNet-18's 3x3 convolutions at 256 channels and more
are up to 1.5x slower. EfficientFormer, whose convolutions are nearly all pointwise (0.87 of their multiply-adds),
takes a fused training step of 0.83 of eager's in channels-last against 0.96 contiguous (``torch.compile`` 0.81).

So with ``thunder.jit(..., conv_layout="auto")`` (the default), when a fusion executor is in the executor list
(the user chose a compiler's numbers, as with ``torch.compile``: ``thunder.discover()`` on the CPU), a program
with a grouped 2-D convolution (``groups > 1``), or whose pointwise convolutions do at least ``POINTWISE_SHARE``
of its convolutions' multiply-adds, or at least ``MIXED_POINTWISE_SHARE`` of them where no dense convolution
larger than 1x1 reads ``WIDE_DENSE_CHANNELS`` channels or more (DenseNet-121: 0.52, 3x3 convolutions of 128
channels; its fused training step 0.93-0.95 of its contiguous one, ``torch.compile`` 0.89-0.90), on the CPU
gets, before each such convolution's and each dense convolution's input that is not channels-last already, a
conversion to channels-last. PyTorch's kernels then give the results of convolutions, batch norms, elementwise
operations, pooling and concatenations of channels-last maps the same layout, so the layout flows through the
network; before any other consumer (a ``view`` or ``reshape`` of a feature map, a ``permute``, a ``linear``) and before the
program returns it, a value is converted back to contiguous, as eager would have it. A program where that would
take a conversion of a feature map (in either direction) for fewer than ``CONVOLUTIONS_PER_CONVERSION``
convolutions running in channels-last (a network that leaves the convolution chain after every convolution, as
ConvNeXt's blocks do) is left as it is: the copies would cost what the format saves. With a fusion executor most
conversions run inside its regions, so MaxViT, whose MBConv blocks of five convolutions sit between attention blocks
that permute the map (2.35 convolutions per conversion), gains: its fused training step goes from 1.10 of
``torch.compile``'s to 1.00 (ConvNeXt, at 1.21, stays level either way).
Values only change by the order of floating-point sums inside the kernels.

A convolution's weight is converted too, once, where its channels-last strides differ from its contiguous ones
(a kernel larger than 1x1 with more than one input channel per group): PyTorch's channels-last kernels otherwise
copy a contiguous weight to channels-last in every call, forward and backward (DenseNet-121 in channels-last: 58
weight copies in each direction a step, 4 ms of its 90), where the program's copy is made once and saved for the
backward. The parameter's gradient comes back in the parameter's own layout (autograd's gradient layout contract).

``conv_layout="channels_last"`` applies the conversions to any program with a 2-D convolution (on any device),
``"as_given"`` never. The conversions are ``contiguous(memory_format=torch.channels_last)`` calls in the trace,
each under a comment that says why.
"""

from __future__ import annotations

import math

import torch

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import hints
from thunder.core.trace import TraceCtx, from_trace, timed_pass, tracectx

__all__ = [
    "CONV_LAYOUTS",
    "CONVOLUTIONS_PER_CONVERSION",
    "MIXED_POINTWISE_SHARE",
    "POINTWISE_SHARE",
    "WIDE_DENSE_CHANNELS",
    "channels_last_convolutions",
]

CONV_LAYOUTS = ("auto", "channels_last", "as_given")

# a program without grouped convolutions is converted where pointwise convolutions do at least this share of the
# multiply-adds of its convolutions (EfficientFormer 0.87; DenseNet-121 0.52 and ResNet-18 0.01 are not by this alone)
POINTWISE_SHARE = 2 / 3

# ... or at least this share where no dense convolution larger than 1x1 has WIDE_DENSE_CHANNELS input channels or more:
# DenseNet-121 (0.52; its 3x3 convolutions read 128 channels) is, ResNet-18 (0.01; 3x3 convolutions of 256 and 512
# channels, 1.2-1.9x slower in channels-last at batch 2, forward and backward) is not
MIXED_POINTWISE_SHARE = 1 / 3
WIDE_DENSE_CHANNELS = 256

# a program is converted only where at least this many convolutions run in channels-last per conversion of a
# feature map (into channels-last, or back to contiguous): MaxViT (2.35: MBConv blocks between attention blocks
# that permute the map) is, ConvNeXt (1.21: a permute after every depthwise convolution) is not
CONVOLUTIONS_PER_CONVERSION = 2

_CONVOLUTIONS = frozenset({"conv2d", "convolution", "_convolution"})

# operations whose PyTorch kernels give a channels-last argument's layout to their (same-rank) results
_LAYOUT_KEEPING = frozenset(
    {
        *_CONVOLUTIONS,
        "batch_norm",
        "batch_norm_functional",
        "native_batch_norm",
        "instance_norm",
        "group_norm",
        "relu",
        "relu_",
        "relu6",
        "hardtanh",
        "hardtanh_",
        "hardswish",
        "hardsigmoid",
        "silu",
        "sigmoid",
        "tanh",
        "gelu",
        "elu",
        "leaky_relu",
        "mish",
        "softplus",
        "add",
        "sub",
        "mul",
        "div",
        "true_divide",
        "neg",
        "exp",
        "where",
        "clamp",
        "dropout",
        "clone",
        "adaptive_avg_pool2d",
        "avg_pool2d",
        "max_pool2d",
        "mean",
        "sum",
        "copy_",
    }
)

_HEADER = (
    "channels-last: this network's grouped or pointwise convolutions run faster in it (thunder.jit(conv_layout=...))"
)
_BACK_HEADER = "back to contiguous, as eager has it"
_WEIGHT_HEADER = "the weight in channels-last once, not in each kernel call (forward and backward)"


def _is_conv2d(bsym) -> bool:
    if bsym.sym.name not in _CONVOLUTIONS or not bsym.args:
        return False
    a = bsym.args[0]
    return isinstance(a, TensorProxy) and a.ndim == 4


def _groups(bsym) -> int:
    groups = bsym.kwargs.get("groups", bsym.args[-1] if bsym.sym.name == "conv2d" and len(bsym.args) == 7 else None)
    if groups is None and bsym.sym.name in ("convolution", "_convolution") and len(bsym.args) >= 9:
        groups = bsym.args[8]
    return groups if isinstance(groups, int) else 1


def _needs_channels_last_weight(w) -> bool:
    """A 4-D weight whose channels-last strides differ from its contiguous ones (not 1x1, more than one input
    channel per group): PyTorch's channels-last kernels would copy it to channels-last at every call, forward and
    backward, where the program can copy it once."""
    if not isinstance(w, TensorProxy) or w.ndim != 4:
        return False
    _, c, kh, kw = (int(d) for d in hints(w.shape))
    return c > 1 and kh * kw > 1


def _concatenates_channels_last(bsym, channels_last: set[str]) -> bool:
    """A ``cat`` of channels-last values only (PyTorch's result is channels-last then; contiguous where any input is
    not): DenseNet's blocks concatenate the maps of their convolutions."""
    if bsym.sym.name != "cat":
        return False
    tensors = [p for p in bsym.flat_args if isinstance(p, TensorProxy)]
    return bool(tensors) and all(p.name in channels_last for p in tensors)


def _feature_map(p) -> bool:
    """A 4-D tensor with more than one spatial position: converting it copies a whole feature map."""
    return isinstance(p, TensorProxy) and p.ndim == 4 and int(p.shape[2]) * int(p.shape[3]) > 1


def _applies(trace: TraceCtx, mode: str, fusing: bool) -> bool:
    convs = [b for b in trace.bound_symbols if _is_conv2d(b)]
    if not convs or mode == "as_given":
        return False
    if mode == "channels_last":
        return True
    if not fusing or any(b.args[0].device.devicetype.name != "CPU" for b in convs):
        return False
    if any(_groups(b) > 1 for b in convs):
        return True
    pointwise, wide_dense = _shares(convs)
    return pointwise >= POINTWISE_SHARE or (pointwise >= MIXED_POINTWISE_SHARE and wide_dense == 0)


def _shares(convs) -> tuple[float, float]:
    """The shares of the convolutions' multiply-adds that pointwise (1x1, ungrouped) convolutions do, and that dense
    (ungrouped, larger than 1x1) convolutions of at least ``WIDE_DENSE_CHANNELS`` input channels do."""
    pointwise = wide_dense = total = 0
    for b in convs:
        weight, out = b.args[1], b.output
        if not (isinstance(weight, TensorProxy) and isinstance(out, TensorProxy)):
            continue
        macs = math.prod(hints(out.shape)) * math.prod(hints(weight.shape[1:]))
        total += macs
        if _groups(b) != 1:
            continue
        if tuple(hints(weight.shape[2:])) == (1, 1):
            pointwise += macs
        elif int(hints(weight.shape)[1]) >= WIDE_DENSE_CHANNELS:
            wide_dense += macs
    return (pointwise / total, wide_dense / total) if total else (0.0, 0.0)


def channels_last_convolutions(trace: TraceCtx, mode: str = "auto", fusing: bool = False) -> TraceCtx:
    """``trace`` with its convolution chains in channels-last where ``mode`` says so (see the module docstring);
    ``fusing``: a fusion executor is in the executor list ("auto" applies only then)."""
    if mode not in CONV_LAYOUTS:
        choices = ", ".join(map(repr, CONV_LAYOUTS))
        raise ValueError(f"thunder.jit(conv_layout={mode!r}): unknown convolution layout; choose one of {choices}")
    if not _applies(trace, mode, fusing):
        return trace
    with timed_pass("Channels-last convolutions") as t:
        new, convolutions, conversions = _rewrite(trace)
        if mode == "auto" and convolutions < CONVOLUTIONS_PER_CONVERSION * conversions:
            return trace
        return t.stamp(new)


def _rewrite(trace: TraceCtx) -> tuple[TraceCtx, int, int]:
    """The rewritten trace, how many convolutions run in channels-last, and how many feature maps it converts."""
    from thunder.torch import contiguous

    new = from_trace(trace)
    channels_last: set[str] = set()  # values in channels-last
    converted: dict[str, TensorProxy] = {}  # a value -> its channels-last copy
    weights: dict[str, TensorProxy] = {}  # a convolution's weight -> its channels-last copy
    back: dict[str, TensorProxy] = {}  # a channels-last value -> its contiguous copy
    convolutions = conversions = 0
    with tracectx(new):
        out = new.bound_symbols
        for bsym in trace.bound_symbols:
            mapping: dict = {}
            if _is_conv2d(bsym) and bsym.args[0].name not in channels_last:
                a = bsym.args[0]
                if a.name not in converted:
                    converted[a.name] = contiguous(a, memory_format=torch.channels_last)
                    out[-1].header = _HEADER
                    channels_last.add(converted[a.name].name)
                    conversions += _feature_map(a)
                mapping[a.name] = converted[a.name]
            if _is_conv2d(bsym):
                convolutions += 1
                w = bsym.args[1]
                if _needs_channels_last_weight(w):
                    if w.name not in weights:
                        weights[w.name] = contiguous(w, memory_format=torch.channels_last)
                        out[-1].header = _WEIGHT_HEADER
                    mapping[w.name] = weights[w.name]
            keeps = (
                bsym.sym.name in _LAYOUT_KEEPING
                or bsym.sym is prims.python_del
                or _concatenates_channels_last(bsym, channels_last)
            )
            reads = [p for p in bsym.flat_args if p.name in channels_last]
            if reads and not keeps:
                for p in reads:
                    if p.name not in back:
                        back[p.name] = contiguous(p)
                        out[-1].header = _BACK_HEADER
                        conversions += _feature_map(p)
                    mapping[p.name] = back[p.name]
            bsym = bsym.swap_proxies(mapping)
            out.append(bsym)
            if keeps and any(p.name in channels_last for p in bsym.flat_args):
                channels_last.update(o.name for o in bsym.flat_outs if isinstance(o, TensorProxy) and o.ndim == 4)
    new.scopes = [new.bound_symbols]
    return new, convolutions, conversions
