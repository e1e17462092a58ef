"""Composite operations run as PyTorch's native kernel pairs, forward and backward, under the default executors.

Values, gradients and BatchNorm's running statistics are compared with eager PyTorch; the backward
traces are checked to call the native backward kernels instead of a differentiated decomposition.
"""

import pytest
import torch
import torch.nn.functional as F

import thunder

DTYPES = [torch.float32, torch.float64, torch.bfloat16]


def _tol(dtype):
    return {"atol": 2e-2, "rtol": 2e-2} if dtype is torch.bfloat16 else {"atol": 1e-5, "rtol": 1e-4}


def _compare(fn, args, dtype, params=()):
    """Runs ``fn`` eagerly and compiled on copies of ``args``; compares outputs and every gradient."""
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad] + list(params)
    eager_out = fn(*args)
    eager_grads = torch.autograd.grad(eager_out, leaves, torch.ones_like(eager_out))
    jfn = thunder.jit(fn)
    out = jfn(*args)
    grads = torch.autograd.grad(out, leaves, torch.ones_like(out))
    torch.testing.assert_close(out, eager_out, **_tol(dtype))
    assert out.dtype == eager_out.dtype and out.requires_grad == eager_out.requires_grad
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, **_tol(dtype))
    return jfn


def _backward_source(jfn) -> str:
    return str(thunder.last_backward_traces(jfn)[-1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("track", [True, False])
def test_batch_norm_module_matches_eager(dtype, train, track):
    torch.manual_seed(0)
    eager = torch.nn.BatchNorm2d(5, track_running_stats=track).to(dtype).train(train)
    with torch.no_grad():
        eager.weight.uniform_(0.5, 1.5)
        eager.bias.uniform_(-0.5, 0.5)
        if track:
            eager.running_mean.uniform_(-0.2, 0.2)
            eager.running_var.uniform_(0.5, 1.5)
    mine = torch.nn.BatchNorm2d(5, track_running_stats=track).to(dtype).train(train)
    mine.load_state_dict(eager.state_dict())
    x = torch.randn(4, 5, 6, 7, dtype=dtype)
    xe, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
    jm = thunder.jit(mine)
    for _ in range(2):  # the running statistics move twice, as eager's
        out_e, out_m = eager(xe), jm(xm)
        ge = torch.autograd.grad(out_e.square().sum(), [xe, eager.weight, eager.bias])
        gm = torch.autograd.grad(out_m.square().sum(), [xm, mine.weight, mine.bias])
        torch.testing.assert_close(out_m, out_e, **_tol(dtype))
        for a, b in zip(gm, ge):
            torch.testing.assert_close(a, b, **_tol(dtype))
    if track:
        torch.testing.assert_close(mine.running_mean, eager.running_mean, **_tol(dtype))
        torch.testing.assert_close(mine.running_var, eager.running_var, **_tol(dtype))
        assert mine.num_batches_tracked == eager.num_batches_tracked
    src = _backward_source(jm)
    assert "native_batch_norm_backward" in src
    # one native kernel: no elementwise op of the input's size in the backward
    assert "torch.mul(" not in src and "torch.sub(" not in src


def test_batch_norm_input_only_gradient_mask():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    rm, rv = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    w = torch.rand(4, dtype=torch.float64)  # no gradient wanted for the weight

    def f(x, rm, rv, w):
        return F.batch_norm(x, rm, rv, w, None, True, 0.1, 1e-5)

    _compare(f, (x, rm.clone(), rv.clone(), w), torch.float64)
    jf = thunder.jit(f)
    rm2, rv2 = rm.clone(), rv.clone()
    jf(x, rm2, rv2, w).sum().backward()
    assert "[True, False, False]" in _backward_source(jf)
    f(x, rm, rv, w)
    torch.testing.assert_close(rm2, rm)
    torch.testing.assert_close(rv2, rv)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_matches_eager(dtype, affine):
    torch.manual_seed(0)
    x = torch.randn(3, 4, 8, dtype=dtype, requires_grad=True)
    w = torch.rand(4, 8, dtype=dtype, requires_grad=True) if affine else None
    b = torch.randn(4, 8, dtype=dtype, requires_grad=True) if affine else None

    def f(x, w, b):
        return F.layer_norm(x, (4, 8), w, b, 1e-5) * 2.0

    params = (w, b) if affine else ()
    jf = _compare(f, (x, w, b), dtype)
    del params
    assert "native_layer_norm_backward" in _backward_source(jf)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm_matches_eager(dtype, affine):
    torch.manual_seed(0)
    x = torch.randn(2, 6, 5, 3, dtype=dtype, requires_grad=True)
    w = torch.rand(6, dtype=dtype, requires_grad=True) if affine else None
    b = torch.randn(6, dtype=dtype, requires_grad=True) if affine else None

    def f(x, w, b):
        return F.group_norm(x, 3, w, b, 1e-5) * 2.0

    jf = _compare(f, (x, w, b), dtype)
    assert "native_group_norm_backward" in _backward_source(jf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 3, "stride": 2, "padding": 1},
        {"kernel_size": (2, 3), "stride": 1, "dilation": 2},
        {"kernel_size": 3, "stride": 2, "ceil_mode": True},
    ],
)
def test_max_pool2d_matches_eager(dtype, kwargs):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 10, dtype=dtype, requires_grad=True)

    def f(x):
        return F.max_pool2d(x, **kwargs) * 3.0

    jf = _compare(f, (x,), dtype)
    assert "max_pool_with_indices_backward" in _backward_source(jf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pools_3d_and_unbatched_match_eager(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 6, 7, 5, dtype=dtype, requires_grad=True)
    u = torch.randn(3, 9, 8, dtype=dtype, requires_grad=True)

    def f(x, u):
        return (
            F.max_pool3d(x, 2).sum()
            + F.avg_pool3d(x, 3, stride=2, padding=1).sum() * 2
            + F.adaptive_avg_pool3d(x, (2, 3, 1)).square().sum()
            + F.max_pool2d(u, 3, 2).square().sum()
            + F.avg_pool2d(u, 2).square().sum()
        )

    _compare(f, (x, u), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"kernel_size": 3, "stride": 2, "padding": 1},
        {"kernel_size": 3, "stride": 1, "padding": 1, "count_include_pad": False},
        {"kernel_size": 2, "ceil_mode": True, "divisor_override": 3},
    ],
)
def test_avg_pool2d_matches_eager(dtype, kwargs):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 7, dtype=dtype, requires_grad=True)

    def f(x):
        return F.avg_pool2d(x, **kwargs).square()

    jf = _compare(f, (x,), dtype)
    assert "avg_pool_backward" in _backward_source(jf)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_adaptive_pools_match_eager(dtype):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 7, dtype=dtype, requires_grad=True)

    def f(x):
        return F.adaptive_avg_pool2d(x, (4, 3)).square().sum() + F.adaptive_max_pool2d(x, (2, None)).square().sum()

    jf = _compare(f, (x,), dtype)
    src = _backward_source(jf)
    assert "adaptive_avg_pool_backward" in src and "adaptive_max_pool_backward" in src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize(
    "max_kwargs,avg_kwargs",
    [
        ({"kernel_size": 3, "stride": 2, "padding": 1}, {"kernel_size": 3, "stride": 2, "padding": 1}),
        ({"kernel_size": (2,), "dilation": 2, "ceil_mode": True}, {"kernel_size": 2, "ceil_mode": True}),
        ({"kernel_size": 3, "stride": 1}, {"kernel_size": 3, "padding": 1, "count_include_pad": False}),
    ],
)
def test_pools_1d_match_eager_and_run_2d_kernels(dtype, batched, max_kwargs, avg_kwargs):
    torch.manual_seed(0)
    x = torch.randn(*((2,) if batched else ()), 3, 11, dtype=dtype, requires_grad=True)

    def f(x):
        return (
            F.max_pool1d(x, **max_kwargs).square().sum()
            + F.avg_pool1d(x, **avg_kwargs).square().sum() * 2
            + F.adaptive_avg_pool1d(x, 4).square().sum() * 3
            + F.adaptive_max_pool1d(x, 5).square().sum() * 4
        )

    jf = _compare(f, (x,), dtype)
    src = _backward_source(jf)
    for kernel in (
        "max_pool_with_indices_backward",
        "avg_pool_backward",
        "adaptive_avg_pool_backward",
        "adaptive_max_pool_backward",
    ):
        assert kernel in src
    assert "unfold" not in src  # no differentiated decomposition


def test_max_pool1d_ties_send_the_gradient_to_one_position_as_eager():
    # a constant row: every window's maximum is tied; eager's kernel picks one position per window
    x = torch.ones(1, 2, 8, dtype=torch.float64, requires_grad=True)

    def f(x):
        return F.max_pool1d(x, 3, 2, 1) * torch.arange(1.0, 5.0, dtype=torch.float64)

    _compare(f, (x,), torch.float64)


def test_pool1d_bad_arguments_raise_eagers_error():
    x = torch.randn(2, 3, 8, requires_grad=True)
    for fn in (lambda x: F.max_pool1d(x, 2, padding=2), lambda x: F.avg_pool1d(x, 2, padding=2)):
        with pytest.raises(RuntimeError) as eager_error:
            fn(x)
        with pytest.raises(Exception, match="pad") as our_error:
            thunder.jit(fn)(x)
        assert "pad" in str(eager_error.value)
        assert "unsqueeze" not in str(our_error.value)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "equation,shapes",
    [
        ("bhid,bhjd->bhij", [(4, 2, 7, 8), (4, 2, 5, 8)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (2, 4, 5)]),
        ("bij,bjk,bkl->bil", [(2, 3, 4), (2, 4, 5), (2, 5, 2)]),
        ("ijk,k->i", [(3, 4, 5), (5,)]),  # j summed within the first operand alone
        ("ij->ji", [(3, 4)]),
    ],
)
def test_einsum_matches_eager_without_broadcast_product(dtype, equation, shapes):
    torch.manual_seed(0)
    ops = [torch.randn(s, dtype=dtype, requires_grad=True) for s in shapes]

    def f(*ops):
        return torch.einsum(equation, *ops) * 1.5

    jf = _compare(f, tuple(ops), dtype)
    if equation == "bhid,bhjd->bhij":
        # the backward's largest value is the product's size (4*2*7*5), not the broadcast product's (x8)
        src = _backward_source(jf)
        assert "torch.einsum" in src and "f32[4, 2, 7, 5, 8]" not in src and "[4, 2, 7, 5, 8]" not in src


def test_einsum_broadcast_size_one_dims_match_eager():
    torch.manual_seed(0)
    a = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(5, 4, 2, dtype=torch.float64, requires_grad=True)
    _compare(lambda a, b: torch.einsum("bij,bjk->bik", a, b), (a, b), torch.float64)


def test_conv_bn_relu_pool_backward_uses_native_kernels():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    )
    jm = thunder.jit(model)
    x = torch.randn(2, 3, 8, 8)
    jm(x).sum().backward()
    src = _backward_source(jm)
    for kernel in (
        "convolution_backward",
        "native_batch_norm_backward",
        "max_pool_with_indices_backward",
        "adaptive_avg_pool_backward",
    ):
        assert kernel in src, kernel


# ---------------------------------------------------------------- the norms' decompositions (what fusion executors fuse)


class _DecomposingFusion(thunder.extend.FusionExecutor):
    """Fuses the native norm symbols and runs their decompositions (prims), as a fusion executor would."""

    region_name = "decomposed"

    def __init__(self):
        super().__init__("decomposing_fusion")
        self.fused: list[str] = []

    def can_fuse(self, bsym) -> bool:
        return bsym.sym.name.startswith(("native_batch_norm", "native_layer_norm", "native_group_norm"))

    def fuse_region(self, region):
        from thunder.executors import pythonex, torchex
        from thunder.executors.fusion import Region, region_trace

        def leaves(bsym):
            if bsym.subsymbols and not bsym.sym.is_prim:
                for sub in bsym.subsymbols:
                    yield from leaves(sub)
            else:
                yield bsym

        self.fused += [b.sym.name for b in region.bound_symbols]
        flat = [leaf for b in region.bound_symbols for leaf in leaves(b)]
        assert all(leaf.sym.is_prim for leaf in flat)
        decomposed = Region(flat, list(region.inputs), list(region.outputs), region.name)
        return region_trace(decomposed, [torchex.ex, pythonex.ex]).python_callable()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("train", [True, False])
def test_norm_decompositions_match_eager(dtype, train):
    # four norms chained: bfloat16's rounding of each layer's gradient adds up (a looser tolerance)
    tol = {"atol": 0.1, "rtol": 0.05} if dtype is torch.bfloat16 else _tol(dtype)
    torch.manual_seed(0)
    eager = torch.nn.Sequential(
        torch.nn.BatchNorm2d(6),
        torch.nn.GroupNorm(3, 6),
        torch.nn.LayerNorm([5, 4]),
        torch.nn.BatchNorm2d(6, affine=False),
    ).to(dtype)
    eager.train(train)
    with torch.no_grad():
        for m in eager.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.3, 0.3)
                m.running_var.uniform_(0.5, 1.5)
    mine = torch.nn.Sequential(
        torch.nn.BatchNorm2d(6),
        torch.nn.GroupNorm(3, 6),
        torch.nn.LayerNorm([5, 4]),
        torch.nn.BatchNorm2d(6, affine=False),
    ).to(dtype)
    mine.load_state_dict(eager.state_dict())
    mine.train(train)
    fusion = _DecomposingFusion()
    jm = thunder.jit(mine, executors=[fusion, *thunder.get_default_executors()])
    x = torch.randn(3, 6, 5, 4, dtype=dtype)
    xe, xm = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_e, out_m = eager(xe), jm(xm)
    torch.testing.assert_close(out_m, out_e, **tol)
    weights = torch.randn_like(out_e)
    ge = torch.autograd.grad((out_e * weights).sum(), [xe, *eager.parameters()])
    gm = torch.autograd.grad((out_m * weights).sum(), [xm, *mine.parameters()])
    for a, b in zip(gm, ge):
        torch.testing.assert_close(a, b, **tol)
    for a, b in zip(mine.buffers(), eager.buffers()):
        torch.testing.assert_close(a, b, **tol)
    assert any(name.endswith("_backward") for name in fusion.fused)
    assert any(name.startswith("native_group_norm") for name in fusion.fused)


@pytest.mark.parametrize("pixels", [(2, 2), (4, 4), (8, 8)])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_convolution_of_a_small_channels_last_map_matches_eager(pixels, stride):
    # the torch executor runs these with contiguous arguments (a faster CPU kernel) and gives the input's gradient
    # back in channels-last: values, gradients and the gradient's layout as eager's
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(48, 48, 5, stride=stride, padding=2, groups=48, dtype=torch.float64)
    x = torch.randn(2, 48, *pixels, dtype=torch.float64).to(memory_format=torch.channels_last).requires_grad_()

    def fn(x, weight, bias):
        y = F.conv2d(x * 2, weight, bias, stride=stride, padding=2, groups=48)
        return y * y

    args = (x, conv.weight, conv.bias)
    expected, actual = fn(*args), thunder.jit(fn)(*args)
    torch.testing.assert_close(actual, expected)
    seed = torch.randn_like(expected)
    torch.testing.assert_close(torch.autograd.grad(actual, args, seed), torch.autograd.grad(expected, args, seed))
    # the kernel itself: eager's values, and its input gradient in eager's layout
    from thunder.executors.torchex import _convolution_backward

    go = torch.randn_like(conv(x)).contiguous(memory_format=torch.channels_last)
    args = (go, x.detach(), conv.weight.detach(), [48], (stride, stride), (2, 2), (1, 1), False, (0, 0), 48)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        ours, eagers = _convolution_backward(*args, mask), torch.ops.aten.convolution_backward(*args, mask)
        for o, e in zip(ours, eagers):
            assert (o is None) == (e is None)
            if e is not None:
                torch.testing.assert_close(o, e)
                assert o.stride() == e.stride()


def test_examine_reports_native_backward_kernels(capsys):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU())
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    report = thunder.examine(model, x)
    assert report.matches is True
    assert report.backward_kernels["native_batch_norm_backward"] == 1
    assert report.backward_kernels["convolution_backward"] == 1
    assert report.backward_kernels["threshold_backward"] == 1
    assert "native_batch_norm_backward (1)" in capsys.readouterr().out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("used", ["all", "some"])
def test_split_backward_concatenates_the_pieces_gradients(dtype, used):
    """As eager's split_backward: one cat of the cotangents (zeros where a piece got none), not a pad per piece."""
    torch.manual_seed(0)
    x = torch.randn(3, 10, 4, dtype=dtype, requires_grad=True)

    def f(x):
        a, b, c = x.split((5, 3, 2), dim=1)
        return a.sum(1) * 2 + c.sum(1) if used == "some" else a.sum(1) * 2 + b.sum(1) + c.sum(1).exp()

    jfn = _compare(f, (x,), dtype)
    backward = _backward_source(jfn)
    assert "torch.cat(" in backward and "pad(" not in backward


def test_chunk_backward_is_one_cat_too():
    x = torch.randn(4, 6, requires_grad=True)
    jfn = _compare(lambda x: torch.stack(x.chunk(3, dim=-1)).square().sum(0), (x,), torch.float32)
    assert "pad(" not in _backward_source(jfn)
