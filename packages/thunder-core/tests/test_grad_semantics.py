"""Gradient semantics of compiled programs against eager PyTorch (issue 13).

Each test is a minimal reproduction of one class of defect: the compiled function must give the
same values, the same ``requires_grad`` on its outputs and the same gradients as eager PyTorch.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from differential.functions import MulSaved

import thunder


def _leaves(inputs):
    return [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def assert_like_eager(fn, *inputs, seed: int | None = None):
    """``thunder.jit(fn)`` agrees with ``fn`` on values, outputs' ``requires_grad`` and input gradients."""
    eager_in, thunder_in = _leaves(inputs), _leaves(inputs)
    if seed is not None:
        torch.manual_seed(seed)
    expected = _flat(fn(*eager_in))
    if seed is not None:
        torch.manual_seed(seed)
    actual = _flat(thunder.jit(fn)(*thunder_in))
    assert len(actual) == len(expected)
    for e, a in zip(expected, actual):
        torch.testing.assert_close(a, e, equal_nan=True)
        assert a.requires_grad == e.requires_grad
    wrt = [i for i, x in enumerate(inputs) if x.requires_grad]
    outs = [(e, a) for e, a in zip(expected, actual) if e.requires_grad]
    if not outs or not wrt:
        return
    torch.manual_seed(1234)
    cots = [torch.randn_like(e) for e, _ in outs]
    eg = torch.autograd.grad([e for e, _ in outs], [eager_in[i] for i in wrt], cots, allow_unused=True)
    tg = torch.autograd.grad([a for _, a in outs], [thunder_in[i] for i in wrt], cots, allow_unused=True)
    for i, e, a in zip(wrt, eg, tg):
        if e is None:
            assert a is None or not a.any(), f"input {i}: eager has no gradient, thunder has {a}"
            continue
        assert a is not None, f"input {i}: thunder gives no gradient, eager gives {e}"
        torch.testing.assert_close(a, e, equal_nan=True, msg=lambda m: f"gradient of input {i}: {m}")


def _x(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, requires_grad=True)


def _t(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


# ---------------------------------------------------------------- stop-gradients


def test_detach_is_a_stop_gradient():
    assert_like_eager(lambda x: x * x.detach(), _x(5))


def test_data_is_a_stop_gradient():
    assert_like_eager(lambda x: x * x.data, _x(5))


def test_straight_through_estimator():
    # gradient 1, not 0: the rounding is hidden from autodiff
    assert_like_eager(lambda x: x + (torch.round(x) - x).detach(), _x(5))


def test_detach_costs_no_copy():
    def fn(x):
        return x * x.detach()

    jfn = thunder.jit(fn)
    jfn(_x(4))
    ran = [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]
    assert "detach" in ran and "clone" not in ran  # torch.detach: a view, no copy


# ---------------------------------------------------------------- grad-mode regions


def _no_grad_region(x):
    with torch.no_grad():
        y = x * 2
    return x * y


def _set_grad_enabled_region(x):
    with torch.set_grad_enabled(False):
        y = x.exp()
    return x * y


def _set_grad_enabled_call(x):
    torch.set_grad_enabled(False)
    y = x.sin()
    torch.set_grad_enabled(True)
    return x * y


def _inference_mode_region(x):
    with torch.inference_mode():
        y = x * 3
    return x * y.clone()


def _enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x * 2
        with torch.enable_grad():
            b = x * 3
    return a * b


@pytest.mark.parametrize(
    "fn",
    [
        _no_grad_region,
        _set_grad_enabled_region,
        _set_grad_enabled_call,
        _inference_mode_region,
        _enable_grad_inside_no_grad,
    ],
)
def test_grad_mode_regions(fn):
    assert_like_eager(fn, _x(4))


def test_output_of_no_grad_region_does_not_require_grad():
    def fn(x):
        with torch.no_grad():
            return x * 2

    assert_like_eager(fn, _x(3))


def test_grad_mode_seen_by_user_code():
    def fn(x):
        with torch.no_grad():
            y = x * 2
            inside = torch.is_grad_enabled()
        return y + 1 if not inside and not y.requires_grad else y

    assert_like_eager(fn, _x(3))


# ---------------------------------------------------------------- requires_grad of outputs


def test_output_independent_of_differentiable_inputs():
    assert_like_eager(lambda x: torch.ones(3, dtype=torch.float64) * 2, _x(3))


def test_outputs_requires_grad_follows_dependence():
    def fn(x, y):
        return x * 2, y * 2, x.argmax()

    assert_like_eager(fn, _x(3), torch.randn(3, dtype=torch.float64))


# ---------------------------------------------------------------- torch.autograd.Function


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 10


class _MulSaved(torch.autograd.Function):
    """Several inputs, a non-tensor argument, save_for_backward and needs_input_grad."""

    @staticmethod
    def forward(ctx, x, w, scale: float):
        ctx.save_for_backward(x, w)
        ctx.scale = scale
        return x * w * scale

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        gx = g * w * ctx.scale * 2 if ctx.needs_input_grad[0] else None  # deliberately not the true gradient
        gw = g * x * ctx.scale if ctx.needs_input_grad[1] else None
        return gx, gw, None


class _TwoOutputs(torch.autograd.Function):
    """Two differentiable outputs and a non-differentiable one."""

    @staticmethod
    def forward(ctx, x):
        a, b = x.sin(), x.cos()
        idx = x.argmax()
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x)
        return a, b, idx

    @staticmethod
    def backward(ctx, ga, gb, gidx):
        (x,) = ctx.saved_tensors
        return ga * x.cos() - gb * x.sin() + 1.0


class _OnceDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.exp()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * x  # deliberately not exp(x)


class _SetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x, k=3.0):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return -g * ctx.k, None


class _NonDifferentiableOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = x * 2
        ctx.mark_non_differentiable(y)
        return y

    @staticmethod
    def backward(ctx, g):
        return g


def test_autograd_function_uses_its_backward():
    assert_like_eager(lambda x: _ScaleGrad.apply(x) * 2, _x(4))


def test_autograd_function_saved_tensors_needs_input_grad_and_non_tensor_args():
    assert_like_eager(lambda x, w: _MulSaved.apply(x, w, 0.5).sum(), _x(3), _x(3))
    assert_like_eager(lambda x, w: _MulSaved.apply(x, w, 0.5), _x(3), torch.randn(3, dtype=torch.float64))


def test_autograd_function_several_outputs_and_mark_non_differentiable():
    def fn(x):
        a, b, idx = _TwoOutputs.apply(x)
        return a * 2 + b, idx

    assert_like_eager(fn, _x(5))
    assert_like_eager(lambda x: _TwoOutputs.apply(x)[0], _x(5))  # an unused output's cotangent is zeros
    assert_like_eager(lambda x: _NonDifferentiableOutput.apply(x) + x, _x(5))


def test_autograd_function_once_differentiable_and_setup_context():
    assert_like_eager(lambda x: _OnceDifferentiable.apply(x), _x(4))
    assert_like_eager(lambda x: _SetupContext.apply(x), _x(4))
    assert_like_eager(lambda x: _SetupContext.apply(x, 5.0), _x(4))


def test_autograd_function_in_a_module_and_its_backward_is_traced():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4, dtype=torch.float64)

        def forward(self, x):
            return _ScaleGrad.apply(self.lin(x)).tanh()

    torch.manual_seed(0)
    net = Net()
    x = torch.randn(2, 4, dtype=torch.float64)
    jnet = thunder.jit(net)
    torch.testing.assert_close(jnet(x), net(x))
    jnet(x).sum().backward()
    thunder_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    net(x).sum().backward()
    for t, e in zip(thunder_grads, (p.grad for p in net.parameters())):
        torch.testing.assert_close(t, e)
    backward = str(thunder.last_backward_traces(jnet)[-1])
    assert "10" in backward  # the user's backward is in the backward trace, where executors can fuse it


def test_autograd_function_without_grad_runs_forward():
    x = _x(3)
    with torch.no_grad():
        out = thunder.jit(lambda x: _ScaleGrad.apply(x) + 1)(x)
    torch.testing.assert_close(out, x.detach() + 1)
    assert not out.requires_grad
    assert torch.autograd.Function.__dict__["apply"].__func__.__module__ == "torch.autograd.function"  # unpatched


# ---------------------------------------------------------------- random operations are never redrawn in backward


def _mask_consistent(fn, x):
    """The gradient of ``sum(fn(x))`` for a ``fn`` that scales each element: ``grad * x == out`` when not redrawn."""
    x = x.detach().requires_grad_()
    out = thunder.jit(fn)(x)
    (g,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(g * x, out)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.dropout(x, 0.5),
        torch.nn.Dropout(0.3).train(),
        lambda x: F.dropout2d(x.view(10, 10, 10, 1), 0.5).view(-1),
        lambda x: -F.rrelu(-x, training=True),
    ],
    ids=["dropout", "Dropout-module", "dropout2d", "rrelu"],
)
def test_random_masks_are_not_redrawn(fn):
    _mask_consistent(fn, torch.rand(1000) + 0.5)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.dropout(x, 0.4),
        lambda x: F.alpha_dropout(x, 0.5, training=True),
        lambda x: F.rrelu(x, training=True),
        lambda x: F.fractional_max_pool2d(x.view(1, 1, 8, 8), 2, output_size=(4, 4)),
        lambda x: F.scaled_dot_product_attention(
            x.view(1, 2, 4, 8), x.view(1, 2, 4, 8), x.view(1, 2, 4, 8), dropout_p=0.5
        ),
    ],
    ids=["dropout", "alpha_dropout", "rrelu", "fractional_max_pool2d", "sdpa-dropout"],
)
def test_random_ops_match_eager_with_the_same_seed(fn):
    assert_like_eager(fn, _x(64), seed=7)


def test_random_decomposition_is_not_recomputed_in_backward():
    from thunder import clang
    from thunder.core import prims
    from thunder.torch.registry import torchsymbol

    @torchsymbol(name="_test_noisy_scale", tags=("random",))
    def noisy_scale(a):
        return clang.mul(a, prims.uniform(a.shape, 0.5, 1.5, device=a.device, dtype=a.dtype))

    _mask_consistent(lambda x: noisy_scale(x), torch.rand(1000, dtype=torch.float64) + 0.5)


# ---------------------------------------------------------------- PyTorch's formulas at singular points


@pytest.mark.parametrize(
    "fn, values",
    [
        (lambda x: x.prod(), [0.0, 2.0, 3.0]),
        (lambda x: x.prod(), [0.0, 0.0, 3.0]),
        (lambda x: x.prod(1), [[0.0, 2.0, 3.0], [1.0, 2.0, 4.0], [0.0, 5.0, 0.0]]),
        (lambda x: x.prod(0, keepdim=True), [[0.0, 2.0], [1.0, 2.0]]),
        (lambda x: torch.linalg.vector_norm(x, dim=1), [[0.0, 0.0], [3.0, 4.0]]),
        (lambda x: x.norm(), [0.0, 0.0, 0.0]),
        (lambda x: torch.linalg.vector_norm(x, dim=0, keepdim=True), [[0.0, 1.0], [0.0, 2.0]]),
        (lambda x: F.normalize(x, dim=1), [[0.0, 0.0], [3.0, 4.0]]),
        (lambda x: torch.pow(x, 0.0), [0.0, 2.0]),
        (lambda x: 2.0**x, [0.0, -1.0]),
        (lambda x: 0.0**x, [0.0, 2.0]),
        (lambda x: x.max(1).values, [[1.0, 1.0, 0.0], [2.0, 3.0, 3.0]]),
        (lambda x: torch.min(x, 0, keepdim=True)[0], [[1.0, 0.0], [1.0, 0.0]]),
        (lambda x: x.amax(1), [[1.0, 1.0, 0.0]]),
        (lambda x: x.max(), [[1.0, 1.0, 0.0]]),
        (lambda x: F.hardtanh(x), [-1.0, 1.0, 0.5, 2.0, -3.0]),
        (lambda x: F.hardtanh(x, -2.0, 0.5), [-2.0, 0.5, 0.0]),
        (lambda x: F.relu6(x), [0.0, 6.0, 0.5, 7.0]),
        (lambda x: F.hardsigmoid(x), [-3.0, 3.0, 0.0]),
        (lambda x: F.hardswish(x), [-3.0, 3.0, 0.0, -4.0, 4.0]),
        (lambda x: x.clamp(-1, 1), [-1.0, 1.0, 0.5]),
        (lambda x: F.leaky_relu(x, 0.2), [0.0, 1.0]),
        (lambda x: x.std(), [1.0, 1.0, 1.0]),
        (lambda x: x.std(1, keepdim=True), [[2.0, 2.0], [1.0, 3.0]]),
    ],
)
def test_singular_points_match_pytorch(fn, values):
    assert_like_eager(fn, _t(values))


@pytest.mark.parametrize(
    "values, exponents",
    [([0.0, 2.0], [2.0, 3.0]), ([0.0, 2.0], [0.0, 3.0]), ([0.0, 0.0], [-1.0, 0.5])],
)
def test_pow_at_zero_base(values, exponents):
    assert_like_eager(torch.pow, _t(values), _t(exponents))


# ---------------------------------------------------------------- gradients that failed where eager works


def _setitem_index(x, v):
    y = x * 1
    y[torch.tensor([0, 2])] = v
    return y


def _setitem_two_indices(x, v):
    y = x * 1
    y[torch.tensor([0, 2]), torch.tensor([1, -1])] = v
    return y


def _setitem_slice(x, v):
    y = x * 1
    y[1:3, 0] = v
    return y


def _setitem_broadcast(x, v):
    y = x * 1
    y[0] = v
    return y


def _index_put_accumulate(x, v):
    return x.index_put((torch.tensor([0, 0, 3]),), v, accumulate=True)


def _index_put_inplace(x, v):
    return x.clone().index_put_((torch.tensor([0, 2]),), v)


@pytest.mark.parametrize(
    "fn, v_shape",
    [
        (_setitem_index, (2, 3)),
        (_setitem_two_indices, (2,)),
        (_setitem_slice, (2,)),
        (_setitem_broadcast, (1,)),
        (_index_put_accumulate, (3, 3)),
        (_index_put_inplace, (2, 3)),
    ],
)
def test_indexed_assignment_gradients(fn, v_shape):
    assert_like_eager(fn, _x(4, 3), _x(*v_shape))


def _instance_norm_with_running_stats(x):
    running_mean, running_var = torch.zeros(4, dtype=x.dtype), torch.ones(4, dtype=x.dtype)
    return F.instance_norm(x, running_mean, running_var, use_input_stats=True)


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (lambda x, w, b: torch.native_layer_norm(x, [4], w, b, 1e-5)[0], [(3, 4), (4,), (4,)]),
        (lambda x, w, b: torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)[0], [(3, 4), (4,), (4,)]),
        (_instance_norm_with_running_stats, [(2, 4, 5)]),
        (
            lambda x: F.nll_loss(
                F.log_softmax(x, 1), torch.tensor([0, 2, 1]), weight=torch.tensor([1.0, 2, 3, 4], dtype=x.dtype)
            ),
            [(3, 4)],
        ),
        (lambda x: torch.linalg.lu(x)[1], [(3, 3)]),
        (lambda x: torch.lu_unpack(*torch.linalg.lu_factor(x))[2], [(3, 3)]),
        (lambda x: torch.linalg.pinv(x), [(3, 4)]),
    ],
    ids=["native_layer_norm", "native_batch_norm", "instance_norm", "nll_loss-weight", "lu", "lu_unpack", "pinv"],
)
def test_opaque_ops_with_non_differentiable_outputs_or_arguments(fn, shapes):
    torch.manual_seed(0)
    assert_like_eager(fn, *(_x(*s) for s in shapes))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.var(x, 0, False),
        lambda x: x.var(dim=1, unbiased=False, keepdim=True),
        lambda x: torch.std(x, unbiased=False),
        lambda x: torch.var_mean(x, 1, unbiased=False)[0],
        lambda x: torch.var(x, True),  # the overload var(input, unbiased)
        lambda x: torch.std(x, False),
        lambda x: torch.var_mean(x, False)[0],
        lambda x: x.index_select(1, torch.tensor([0, 2, 2])),
        lambda x: x.index_select(-1, torch.tensor(1)),
        lambda x: x.index_fill(1, torch.tensor([0, 2]), -1.0),
        lambda x: x.index_fill(-1, torch.tensor(1), 2.0),
    ],
)
def test_var_std_index_select_index_fill(fn):
    assert_like_eager(fn, _x(3, 4))


def test_zero_dim_index_select_and_index_fill():
    assert_like_eager(lambda x: x.index_select(0, torch.tensor([0])), _t(2.0))
    assert_like_eager(lambda x: x.index_fill(0, torch.tensor([0]), -1.0), _t(2.0))
    assert_like_eager(lambda x, v: x.index_fill(1, torch.tensor([0, 2]), v), _x(3, 4), _t(5.0))


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: torch.atan2(a, b),
        lambda a, b: torch.xlogy(a, b),
        lambda a, b: torch.xlogy(a, 3.0) + torch.xlogy(2.0, b.abs()),
        lambda a, b: torch.xlogy(a.view(2, 3), b[:3]),
    ],
    ids=["atan2", "xlogy", "xlogy-scalars", "xlogy-broadcast"],
)
def test_binary_singular_points(fn):
    a = _t([0.0, 0.0, 1.0, -1.0, 0.0, 2.0])
    b = _t([0.0, -1.0, 0.0, 2.0, 0.0, 0.5])
    assert_like_eager(fn, a, b)


# ---------------------------------------------------------------- in-place updates under no_grad


def _no_grad_mul_(x):
    y = x * 2
    with torch.no_grad():
        y.mul_(3)  # invisible to autograd: y keeps the gradient of x * 2
    return y * x


def _no_grad_setitem(x):
    y = x * 2
    with torch.no_grad():
        y[0] = 5.0
    return y * x


def _no_grad_update_through_view(x):
    y = x * 2
    v = y[1:]
    with torch.no_grad():
        v.mul_(10)
    return y * x


def _no_grad_copy_into_constant(x):
    b = torch.zeros(3, dtype=x.dtype)
    with torch.no_grad():
        b.copy_(x * 3)  # b needs no gradient: nothing flows back to x through it
    return b * x


@pytest.mark.parametrize(
    "fn", [_no_grad_mul_, _no_grad_setitem, _no_grad_update_through_view, _no_grad_copy_into_constant]
)
def test_in_place_update_under_no_grad(fn):
    assert_like_eager(fn, _x(3))


def _copy_over_nan_history(x):
    v = x.var()  # NaN for one element: its backward gives NaN even for a zero gradient
    w = v * v
    w.copy_(x)  # copy_'s backward gives w's former values a zero gradient (NaN through var), as in eager
    return w


def _fill_over_nan_history(x):
    w = x.var() * 2
    w.fill_(2.0)
    return w * x


def _copy_over_finite_history(x):
    w = torch.sin(x.sum()) * 3
    w.copy_(x * 2)
    return w


@pytest.mark.filterwarnings("ignore:var\\(\\)")
@pytest.mark.parametrize("fn", [_copy_over_nan_history, _fill_over_nan_history, _copy_over_finite_history])
def test_overwritten_values_get_a_zero_gradient(fn):
    assert_like_eager(fn, _t(1.5))


def _trace_names(bsyms, acc):
    for b in bsyms:
        acc.append(b.sym.name)
        _trace_names(b.subsymbols, acc)
    return acc


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.dropout(x, 0.5) * x,
        lambda x: x * (torch.rand_like(x) > 0.5) * x,
        lambda x: (x + torch.randn_like(x)).sin(),
    ],
    ids=["dropout", "rand-mask", "randn-noise"],
)
def test_backward_draws_no_random_numbers(fn):
    x = _x(64)
    jfn = thunder.jit(fn)
    jfn(x).sum().backward()
    names = _trace_names(thunder.last_backward_traces(jfn)[-1].bound_symbols, [])
    drawn = [n for n in names if any(r in n for r in ("rand", "uniform", "bernoulli", "dropout", "normal"))]
    assert not drawn, f"the backward draws random numbers: {drawn}"


@pytest.mark.parametrize("use_reentrant", [True, False])
def test_activation_checkpointing_in_a_module(use_reentrant):
    import torch.utils.checkpoint as checkpoint

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.block = torch.nn.Sequential(torch.nn.Linear(4, 4, dtype=torch.float64), torch.nn.Tanh())

        def forward(self, x):
            return checkpoint.checkpoint(self.block, x, use_reentrant=use_reentrant).sum()

    torch.manual_seed(0)
    net = Net()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    net(x).backward()
    expected = [x.grad.clone()] + [p.grad.clone() for p in net.parameters()]
    x.grad = None
    net.zero_grad()
    thunder.jit(net)(x).backward()
    for e, a in zip(expected, [x.grad] + [p.grad for p in net.parameters()]):
        torch.testing.assert_close(a, e)


def test_requires_grad_seen_by_user_code_follows_eager():
    def fn(x, w):
        y = x * w
        flags = [y.requires_grad, (x * 2).requires_grad, x.argmax().requires_grad]
        with torch.no_grad():
            flags.append((x * w).requires_grad)
        return y + sum(flags)

    assert_like_eager(fn, _x(3), _x(3))
    assert_like_eager(fn, _x(3), torch.randn(3, dtype=torch.float64))
    x = _x(3)
    with torch.no_grad():
        torch.testing.assert_close(thunder.jit(fn)(x, x), fn(x, x))


def test_hf_gpt2_training_with_dropout_matches_eager():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, resid_pdrop=0.2, embd_pdrop=0.2, attn_pdrop=0.2
    )
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    x = torch.randint(0, 64, (2, 8))
    torch.manual_seed(1)
    expected = model(x).logits
    expected.sum().backward()
    expected_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(1)  # thunder draws the same dropout masks as eager, and its backward uses them
    actual = thunder.jit(model)(x).logits
    actual.sum().backward()
    torch.testing.assert_close(actual, expected)
    for e, p in zip(expected_grads, model.parameters()):
        torch.testing.assert_close(p.grad, e)


_scale_grad = _ScaleGrad.apply  # a reference taken before tracing: PyTorch's own apply runs


def test_autograd_function_apply_through_an_old_reference_is_a_clear_error():
    from thunder.tracing.errors import TracingError

    with pytest.raises(TracingError, match=r"_ScaleGrad.apply was called through a reference.*test_grad_semantics.py"):
        thunder.jit(lambda x: _scale_grad(x) * 2)(_x(3))


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_attention_with_a_fully_masked_row(kind):
    keep = torch.tensor([[True, True, False], [True, True, True], [False, False, False]])
    mask = keep if kind == "bool" else torch.zeros(3, 3, dtype=torch.float64).masked_fill(~keep, float("-inf"))

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    assert_like_eager(fn, _x(1, 2, 3, 4), _x(1, 2, 3, 4), _x(1, 2, 3, 4))


def test_enable_grad_inside_a_call_under_no_grad_is_a_clear_error():
    from thunder.tracing.errors import TracingError

    def fn(x):
        with torch.enable_grad():
            return x * 2  # eager: requires grad even under an outer no_grad

    with torch.no_grad(), pytest.raises(TracingError, match=r"enables grad.*test_grad_semantics.py"):
        thunder.jit(fn)(_x(3))


# ---------------------------------------------------------------- fills: zero gradients, as in eager


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.fill(x, 2.0),
        lambda x: x.clone().zero_(),
        lambda x: x.clone().fill_(3.0),
        lambda x: (x * 1).fill_(x[0] * 2),
    ],
    ids=["fill", "zero_", "fill_", "fill_tensor_value"],
)
def test_fills_require_grad_with_zero_gradient(fn):
    # eager: the result requires grad (FillBackward) and the filled tensor gets zeros, not "unused"
    assert_like_eager(fn, _x(3))


def test_leaf_updated_under_no_grad_keeps_its_gradient():
    # found by the differential fuzzer: the no_grad copy_ into the leaf was returned as a differentiable
    # output of the compiled function, and its cotangent leaked into the leaf's gradient
    def fn(a):
        v = a * -0.5
        with torch.no_grad():
            a.copy_(v)
        return v

    results = []
    for f in (fn, thunder.jit(fn)):
        a = torch.tensor([0.5, -1.5, -0.5], dtype=torch.float64, requires_grad=True)
        out = f(a)
        out.sum().backward()
        results.append((out.detach(), a.detach().clone(), a.grad, a.is_leaf))
    (eo, ea, eg, el), (to, ta, tg, tl) = results
    torch.testing.assert_close(to, eo)
    torch.testing.assert_close(ta, ea)
    torch.testing.assert_close(tg, eg)
    assert tl == el


# ---------------------------------------------------------------- PyTorch's formulas at NaN and infinities
# (found by the differential fuzzer: the std of one element is NaN, and a NaN reaching maximum, relu or
# clamp took a gradient other than eager's)

_SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, 1.0, -1.0, 0.5, -3.0, 3.0, 6.0]


@pytest.mark.parametrize(
    "fn",
    [
        torch.relu,
        torch.sigmoid,
        F.hardsigmoid,
        F.softplus,
        F.logsigmoid,
        F.leaky_relu,
        lambda x: x.clamp(-0.5, 0.5),
        lambda x: x.clamp(min=0),
        lambda x: x.clamp(max=0),
        lambda x: x.amax(),
        lambda x: x.reshape(2, 5).amin(1),
        lambda x: x.max(),
        lambda x: x.reshape(5, 2).min(),
    ],
    ids=lambda f: getattr(f, "__name__", "lambda"),
)
def test_activations_at_nan_and_infinities(fn):
    assert_like_eager(fn, _t(_SPECIAL))


@pytest.mark.parametrize(
    "fn",
    [F.hardtanh, F.relu6, F.hardswish, F.elu, F.selu, lambda x: F.celu(x, 0.5)],
    ids=lambda f: getattr(f, "__name__", "celu"),
)
def test_activations_at_infinities_and_bounds(fn):
    # at a NaN these have no one eager answer: PyTorch's scalar and vectorised CPU kernels differ
    assert_like_eager(fn, _t(_SPECIAL[1:]))


@pytest.mark.parametrize(
    "fn",
    [
        torch.maximum,
        torch.minimum,
        lambda a, b: torch.clamp(a, b, b + 1),
        lambda a, b: torch.clamp(a, b, 0.5 * b),  # min > max where b < 0
        lambda a, b: torch.clamp(a, min=b),
        lambda a, b: torch.clamp(a, max=b),
        lambda a, b: torch.clamp(a.view(10, 10), b.view(10, 10)[0], b.view(10, 10)[:, :1] + 1),  # broadcast bounds
        torch.xlogy,
        torch.remainder,
    ],
    ids=[
        "maximum",
        "minimum",
        "clamp",
        "clamp_crossed",
        "clamp_min",
        "clamp_max",
        "clamp_broadcast",
        "xlogy",
        "remainder",
    ],
)
def test_binary_ops_at_nan_ties_and_infinities(fn):
    pairs = [(a, b) for a in _SPECIAL for b in _SPECIAL]
    assert_like_eager(fn, _t([a for a, _ in pairs]), _t([b for _, b in pairs]))


def test_maximum_with_a_nan_gives_both_sides_the_gradient():
    # the fuzzer's shrunk repro: std of one element is NaN, the same tensor is passed twice
    def fn(a0, a1):
        return torch.maximum(torch.log_softmax(a0.std(), 0).detach(), a1)

    a = torch.tensor(0.3, requires_grad=True)
    b = torch.tensor(0.3, requires_grad=True)
    fn(a, a).backward()
    thunder.jit(fn)(b, b).backward()
    torch.testing.assert_close(b.grad, a.grad)


def test_norm_of_a_zero_dim_zero():
    assert_like_eager(lambda a: F.log_softmax(torch.cos(a).sum(), dim=0).norm(), _x(2, 3))


def test_filled_tensor_used_under_no_grad_does_not_require_grad():
    def fn(a):
        v = a * 2
        v.fill_(1.5)  # a fresh full() that requires grad, as in eager
        with torch.no_grad():
            w = v * 2
        return w, v

    assert_like_eager(fn, _x(2, 1))


def test_tensor_updated_in_place_by_a_value_requiring_grad_requires_grad():
    # found by the fuzzer: an int tensor cast to float and multiplied in place by a tensor that requires
    # grad; the custom Function saw the stale requires_grad=False and its output did not require grad
    def fn(a, i):
        v = i.double()
        v.mul_(a)
        return _ScaleGrad.apply(v), v * 1

    assert_like_eager(fn, _x(3), torch.tensor([-3, 1, 2]))


class _MulInPlace(torch.autograd.Function):
    """Updates its first input in place (ctx.mark_dirty) and returns it; a backward unlike the forward's."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x.clone(), w)
        x.mul_(w)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        x0, w = ctx.saved_tensors
        return g * w * 3, g * x0


def _dirty_intermediate(a, w):
    y = a * 2
    z = _MulInPlace.apply(y, w)
    return z * 1, y + 1  # z is y: both see the update and the Function's gradient


def _dirty_view(a, w):
    y = a * 2
    _MulInPlace.apply(y[1:], w[1:])
    return y


@pytest.mark.parametrize("fn", [_dirty_intermediate, _dirty_view], ids=["intermediate", "view"])
def test_autograd_function_mark_dirty(fn):
    assert_like_eager(fn, _x(3), _x(3))


def test_autograd_function_mark_dirty_of_an_input():
    def fn(buf, w):
        return _MulInPlace.apply(buf, w) * 1

    results = []
    for f in (fn, thunder.jit(fn)):
        buf, w = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
        out = f(buf, w)
        (gw,) = torch.autograd.grad(out.sum(), [w])
        results.append((out.detach(), buf.detach().clone(), buf.requires_grad, gw))
    for e, a in zip(*results):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(a, e)
        else:
            assert a == e


def test_autograd_function_on_an_aliased_argument_updated_under_no_grad():
    # found by the fuzzer: the Function's argument is a view (of the storage two aliased arguments share)
    # whose value is derived lazily after an update through the other alias
    def fn(a, a_t):
        with torch.no_grad():
            a_t.mul_(a_t - 3)
        return _ScaleGrad.apply(a)

    base = torch.tensor([[0.25, 0.5, -0.75]], dtype=torch.float64, requires_grad=True)
    results = []
    for f in (fn, thunder.jit(fn)):
        a = base.detach().clone().requires_grad_(True)
        out = f(a, a.mT)
        (g,) = torch.autograd.grad(out.sum(), [a])
        results.append((out.detach(), g))
    for e, t in zip(*results):
        torch.testing.assert_close(t, e)


def test_one_autograd_function_applied_with_different_differentiable_inputs():
    """Two applies of one Function, the first with one input requiring grad and the second with two: each call
    runs its own operation (they shared a name, so the first ran the second's and failed to unpack; found by
    the fuzzer)."""

    def fn(a):
        with torch.no_grad():
            c = torch.cos(a)
        v = MulSaved.apply(a, c)
        return MulSaved.apply(v, v * 2)

    assert_like_eager(fn, _x(2, 3))
