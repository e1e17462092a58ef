"""Channels-last convolution chains (thunder.transforms.conv_layout): which programs get them, and that they
change nothing but speed: outputs, their strides, gradients and BatchNorm statistics as eager's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.extend import FusionExecutor
from thunder.transforms.conv_layout import CONVOLUTIONS_PER_CONVERSION

# a fusion executor in the list is what makes "auto" apply (the user chose a compiler's numbers); this one fuses
# nothing, so the tests see the layout pass alone
_FUSING = [FusionExecutor("test_fuses_nothing"), *thunder.get_default_executors()]


def _converts(jm) -> bool:
    return any("memory_format=torch.channels_last" in str(t) for t in thunder.last_traces(jm))


def _conversions(trace) -> tuple[int, int]:
    """How many feature maps and how many weights ``trace``'s code converts to channels-last."""
    maps = weights = 0
    header = ""
    for line in str(trace).splitlines():
        stripped = line.strip()
        if line.startswith("  # ") and not line.startswith("   "):
            header = stripped
        elif not stripped.startswith("#") and "memory_format=torch.channels_last)" in stripped:
            if header.startswith("# the weight in channels-last"):
                weights += 1
            else:
                maps += 1
    return maps, weights


class _Grouped(torch.nn.Module):
    """A MobileNet-like stack: a stem, then depthwise (or grouped) and pointwise convolutions with BatchNorm."""

    def __init__(self, groups="depthwise", blocks=3, c=8, feature_map=False, view_after=False):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1, bias=False)
        g = c if groups == "depthwise" else groups
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Conv2d(c, c, 3, padding=1, groups=g, bias=False),
                torch.nn.BatchNorm2d(c),
                torch.nn.ReLU6(inplace=True),
                torch.nn.Conv2d(c, c, 1, bias=False),
                torch.nn.BatchNorm2d(c),
            )
            for _ in range(blocks)
        )
        self.fc = torch.nn.Linear(c, 5)
        self.feature_map, self.view_after = feature_map, view_after

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        if self.view_after:  # a consumer that needs eager's layout: a view of the spatial map
            x = x.view(x.shape[0], x.shape[1], -1).mean(-1)
            return self.fc(x)
        if self.feature_map:
            return x, self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def _step(model, x):
    out = model(x)
    outs = out if isinstance(out, tuple) else (out,)
    sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).reshape(o.shape)).sum() for o in outs).backward()
    return outs


def _matches_eager(model, x, **jit_options):
    """Two training steps of ``model`` under thunder.jit (with a fusion executor unless ``executors=`` says
    otherwise) and of its copy in eager, in float64: outputs and their strides, gradients, BatchNorm statistics.
    Returns the jitted model."""
    model = model.double()
    eager, mine = model, copy.deepcopy(model)
    jm = thunder.jit(mine, **{"executors": _FUSING, **jit_options})
    for _ in range(2):
        want, got = _step(eager, x.double()), _step(jm, x.double())
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride()
        for (name, pe), pm in zip(eager.named_parameters(), mine.parameters()):
            torch.testing.assert_close(pm.grad, pe.grad, msg=lambda m, name=name: f"grad of {name}: {m}")
            assert pm.grad.stride() == pe.grad.stride(), name
            pe.grad = pm.grad = None
        for be, bm in zip(eager.buffers(), mine.buffers()):
            torch.testing.assert_close(bm, be)
    return jm


@pytest.mark.parametrize("groups", ["depthwise", 2], ids=["depthwise", "grouped"])
def test_a_grouped_convolution_network_runs_channels_last_with_eagers_answers(groups):
    jm = _matches_eager(_Grouped(groups), torch.randn(2, 3, 10, 10))
    assert _converts(jm)
    # one conversion in, none of a feature map back (the pooled [N, C, 1, 1] map goes back before flatten)
    maps, weights = _conversions(thunder.last_traces(jm)[-1])
    assert maps == 1
    # the 3x3 weights with more than one input channel per group (the stem's; the grouped ones) are converted once,
    # in the forward: the backward's kernels read those copies (no conversion there)
    assert weights == (1 if groups == "depthwise" else 4)
    assert _conversions(thunder.last_backward_traces(jm)[-1]) == (0, 0)


def test_the_default_executors_keep_eagers_layout_and_numbers():
    # channels-last float32 gradients sum in another order (single-threaded, far less accurately where they cancel):
    # without a fusion executor, thunder keeps eager's layout
    jm = _matches_eager(_Grouped(), torch.randn(2, 3, 10, 10), executors=thunder.get_default_executors())
    assert not _converts(jm)
    jm = _matches_eager(_Grouped(), torch.randn(2, 3, 10, 10), executors=None, conv_layout="channels_last")
    assert _converts(jm)


def test_a_dense_convolution_network_is_left_as_given():
    class Dense(_Grouped):
        def __init__(self):
            super().__init__(groups=1)

    jm = _matches_eager(Dense(), torch.randn(2, 3, 10, 10))
    assert not _converts(jm)
    # unless asked
    jm = _matches_eager(Dense(), torch.randn(2, 3, 10, 10), conv_layout="channels_last")
    assert _converts(jm)


def test_as_given_never_converts_and_a_bad_value_names_the_option():
    jm = _matches_eager(_Grouped(), torch.randn(2, 3, 10, 10), conv_layout="as_given")
    assert not _converts(jm)
    with pytest.raises(ValueError, match="conv_layout='nchw'"):
        thunder.jit(_Grouped(), executors=_FUSING, conv_layout="nchw")(torch.randn(2, 3, 10, 10))


def test_a_returned_feature_map_has_eagers_layout():
    # (a conversion back of a feature map: enough convolutions to pay for it, CONVOLUTIONS_PER_CONVERSION)
    jm = _matches_eager(_Grouped(blocks=4, feature_map=True), torch.randn(2, 3, 10, 10))  # (checks the strides)
    assert _converts(jm)


def test_a_channels_last_input_is_used_as_it_is():
    x = torch.randn(2, 3, 10, 10).contiguous(memory_format=torch.channels_last)
    _matches_eager(_Grouped(), x)


def test_a_view_of_a_spatial_map_gets_it_back_in_eagers_layout():
    # x.view(N, C, -1) of a channels-last map would raise: the map goes back to contiguous first
    jm = _matches_eager(_Grouped(blocks=4, view_after=True), torch.randn(2, 3, 10, 10))
    assert _converts(jm)


def test_a_network_leaving_the_chain_after_each_convolution_is_left_as_given():
    # ConvNeXt's blocks permute the map after their depthwise convolution (LayerNorm, MLP): a conversion back
    # per block would cost what the format saves
    class Permuting(torch.nn.Module):
        def __init__(self, c=8, blocks=3):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, c, 2, stride=2)
            self.dw = torch.nn.ModuleList(torch.nn.Conv2d(c, c, 7, padding=3, groups=c) for _ in range(blocks))
            self.norm = torch.nn.LayerNorm(c)

        def forward(self, x):
            x = self.stem(x)
            for dw in self.dw:
                x = x + self.norm(dw(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
            return x.mean((2, 3))

    assert CONVOLUTIONS_PER_CONVERSION > 1
    jm = _matches_eager(Permuting(), torch.randn(2, 3, 16, 16))
    assert not _converts(jm)


def test_a_network_of_convolution_blocks_between_permuting_blocks_runs_channels_last():
    # MaxViT: MBConv blocks (1x1, depthwise 3x3, squeeze-excitation on 1x1 maps, 1x1) between attention blocks that
    # permute the map: 5 convolutions per 2 conversions of a feature map, which its fused step gains from (1.10 of
    # torch.compile's step contiguous, 1.00 channels-last); it was left contiguous when 4 were asked for
    class MBConvThenPermute(torch.nn.Module):
        def __init__(self, c=8, blocks=2):
            super().__init__()
            self.stem = torch.nn.Conv2d(3, c, 3, padding=1)
            self.blocks = torch.nn.ModuleList(
                torch.nn.ModuleDict(
                    {
                        "expand": torch.nn.Conv2d(c, 2 * c, 1),
                        "dw": torch.nn.Conv2d(2 * c, 2 * c, 3, padding=1, groups=2 * c),
                        "se_reduce": torch.nn.Conv2d(2 * c, 4, 1),
                        "se_expand": torch.nn.Conv2d(4, 2 * c, 1),
                        "project": torch.nn.Conv2d(2 * c, c, 1),
                        "norm": torch.nn.LayerNorm(c),
                    }
                )
                for _ in range(blocks)
            )

        def forward(self, x):
            x = self.stem(x)
            for b in self.blocks:
                y = torch.nn.functional.gelu(b["dw"](b["expand"](x)))
                y = y * torch.sigmoid(b["se_expand"](torch.relu(b["se_reduce"](y.mean((2, 3), keepdim=True)))))
                x = x + b["project"](y)
                x = x + b["norm"](x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)  # (the attention block's permute)
            return x.mean((2, 3))

    assert CONVOLUTIONS_PER_CONVERSION <= 5 / 2
    jm = _matches_eager(MBConvThenPermute(), torch.randn(2, 3, 12, 12))
    assert _converts(jm)


def test_contiguous_with_a_memory_format_matches_eager():
    def f(x):
        y = x.contiguous(memory_format=torch.channels_last)
        return y * 2, y.contiguous(), y

    x = torch.randn(2, 3, 4, 5, requires_grad=True)
    xe = x.detach().clone().requires_grad_()
    got, want = thunder.jit(f)(x), f(xe)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()
    sum(o.sum() for o in got).backward()
    sum(o.sum() for o in want).backward()
    torch.testing.assert_close(x.grad, xe.grad)
    with pytest.raises(RuntimeError, match="rank 4"):
        thunder.jit(f)(torch.randn(3, 4, 5))


class _Pointwise(torch.nn.Module):
    """An EfficientFormer-like stack: a 3x3 stem, then MLP blocks of pointwise (1x1) convolutions with BatchNorm."""

    def __init__(self, c=8, blocks=3):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1)
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(
                torch.nn.Conv2d(c, 4 * c, 1),
                torch.nn.BatchNorm2d(4 * c),
                torch.nn.GELU(),
                torch.nn.Conv2d(4 * c, c, 1),
                torch.nn.BatchNorm2d(c),
            )
            for _ in range(blocks)
        )
        self.fc = torch.nn.Linear(c, 5)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = x + block(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def test_a_network_of_pointwise_convolutions_runs_channels_last_with_eagers_answers():
    from thunder.transforms.conv_layout import POINTWISE_SHARE

    # pointwise convolutions: 3 blocks x 2 x 4c^2 multiply-adds per pixel against the stem's 27c
    assert 24 * 8 * 8 / (24 * 8 * 8 + 27 * 8) >= POINTWISE_SHARE
    jm = _matches_eager(_Pointwise(), torch.randn(2, 3, 10, 10))
    assert _converts(jm)
    # without a fusion executor, eager's layout
    jm = _matches_eager(_Pointwise(), torch.randn(2, 3, 10, 10), executors=thunder.get_default_executors())
    assert not _converts(jm)


class _DenseBlocks(torch.nn.Module):
    """A DenseNet-like stack: each layer (BatchNorm, ReLU, a pointwise bottleneck, BatchNorm, ReLU, a 3x3
    convolution) reads the concatenation of the maps before it."""

    def __init__(self, c=32, growth=4, layers=3, dense_channels=None):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 1, bias=False)
        self.layers = torch.nn.ModuleList()
        width = c
        for _ in range(layers):
            bottleneck = dense_channels or 2 * growth
            self.layers.append(
                torch.nn.Sequential(
                    torch.nn.BatchNorm2d(width),
                    torch.nn.ReLU(),
                    torch.nn.Conv2d(width, bottleneck, 1, bias=False),
                    torch.nn.BatchNorm2d(bottleneck),
                    torch.nn.ReLU(),
                    torch.nn.Conv2d(bottleneck, growth, 3, padding=1, bias=False),
                )
            )
            width += growth
        self.fc = torch.nn.Linear(width, 5)

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        return self.fc(F.adaptive_avg_pool2d(torch.cat(features, 1), 1).flatten(1))


def test_a_densenet_like_network_runs_channels_last_with_its_concatenations():
    from thunder.transforms.conv_layout import MIXED_POINTWISE_SHARE, POINTWISE_SHARE, WIDE_DENSE_CHANNELS

    # its pointwise share sits between the two thresholds, and its 3x3 convolutions read fewer than WIDE_DENSE_CHANNELS
    model, x = _DenseBlocks(), torch.randn(2, 3, 6, 6)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    macs = {m: m.weight[0].numel() * m.out_channels for m in convs}  # (per pixel: every map is 6x6)
    pointwise = sum(v for m, v in macs.items() if m.kernel_size == (1, 1)) / sum(macs.values())
    assert MIXED_POINTWISE_SHARE <= pointwise < POINTWISE_SHARE
    assert all(m.in_channels < WIDE_DENSE_CHANNELS for m in convs)
    jm = _matches_eager(model, x)
    # one conversion in; the concatenations of channels-last maps stay channels-last: no feature map goes back (only
    # the pooled [N, C, 1, 1] map, before flatten)
    trace = str(thunder.last_traces(jm)[-1])
    assert _conversions(trace)[0] == 1
    lines = trace.splitlines()
    back = [lines[i + 1] for i, line in enumerate(lines) if line.strip() == "# back to contiguous, as eager has it"]
    assert back and all(line.endswith(', 1, 1]"') for line in back), back


def test_a_densenet_like_network_with_a_wide_dense_convolution_keeps_eagers_layout():
    from thunder.transforms.conv_layout import WIDE_DENSE_CHANNELS

    # (3x3 convolutions of 256 input channels and more are slower in channels-last: ResNet-18's)
    jm = _matches_eager(_DenseBlocks(dense_channels=WIDE_DENSE_CHANNELS), torch.randn(2, 3, 6, 6))
    assert not _converts(jm)


def test_a_concatenation_with_a_contiguous_map_goes_back_to_contiguous_first():
    class CatWithInput(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pointwise = torch.nn.ModuleList(torch.nn.Conv2d(8, 8, 1) for _ in range(4))

        def forward(self, x):
            y = x
            for conv in self.pointwise:
                y = torch.relu(conv(y))
            # y is channels-last, x (the argument) is not: PyTorch's cat of the two is contiguous
            return torch.cat([y, x], 1).sum((2, 3))

    jm = _matches_eager(CatWithInput(), torch.randn(2, 8, 5, 5))
    assert _converts(jm)
    assert "back to contiguous" in str(thunder.last_traces(jm)[-1])
