"""A compiled training step runs no more PyTorch work than eager autograd does.

Each test runs one step eagerly and compiled, compares values and gradients with eager, and counts the
``aten`` operations both steps call (below autograd, by a ``TorchDispatchMode``): no operation that
computes (allocates and fills a tensor) may run more often in the compiled step than in eager's.
Operations that only describe memory (views, reshapes, strides) are not counted.
"""

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import thunder

# aten operations that make no new values (a view, a reshape of a contiguous tensor, metadata)
_METADATA_OPS = frozenset(
    "view _unsafe_view reshape expand as_strided t transpose permute squeeze unsqueeze detach alias "
    "slice select split_with_sizes split unbind empty empty_like empty_strided resize lift_fresh".split()
)

# the same work under another name: eager's slice backward is a zero-filled buffer with the slice's
# gradient copied in, thunder's a constant pad of it; eager's batch norm calls native_batch_norm, which
# thunder calls by its newer name
_SAME_WORK = {"constant_pad_nd": "slice_backward", "_native_batch_norm_legit": "native_batch_norm"}


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.rstrip("_")  # an in-place form (add_) counts as its operation (add)
        name = _SAME_WORK.get(name, name)
        if name not in _METADATA_OPS:
            self.counts[name] += 1
        return func(*args, **(kwargs or {}))


def _step_counts(model, x) -> tuple[Counter, torch.Tensor, list]:
    with _CountOps() as mode:
        out = model(x)
        out.square().mean().backward()
    grads = [p.grad for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    return mode.counts, out.detach(), grads


def _more_work_than_eager(make, x, **jit_options) -> dict:
    """Compares a compiled step with eager's (values, gradients); the operations it calls more often."""
    torch.manual_seed(0)
    eager = make()
    torch.manual_seed(0)
    jmodel = thunder.jit(make(), **jit_options)
    _step_counts(jmodel, x)  # compiles
    eager_counts, eager_out, eager_grads = _step_counts(eager, x)
    counts, out, grads = _step_counts(jmodel, x)
    torch.testing.assert_close(out, eager_out, atol=1e-5, rtol=1e-4)
    for g, e in zip(grads, eager_grads):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    return {op: (eager_counts[op], n) for op, n in counts.items() if n > eager_counts[op]}


class _ConvNeXtBlock(torch.nn.Module):
    """A ConvNeXt block (depthwise conv, channels-last LayerNorm, MLP with GELU, layer scale, residual) after a stem."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 2, stride=2)
        self.dwconv = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = torch.nn.LayerNorm(c)
        self.fc1 = torch.nn.Linear(c, 4 * c)
        self.fc2 = torch.nn.Linear(4 * c, c)
        self.gamma = torch.nn.Parameter(torch.full((c,), 0.5))

    def forward(self, x):
        x = self.stem(x)
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.fc2(F.gelu(self.fc1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


def test_convnext_block_step_computes_nothing_eager_does_not():
    x = torch.randn(2, 3, 16, 16)
    assert _more_work_than_eager(_ConvNeXtBlock, x, recompute="reshapes") == {}
    # by default gelu's output is made again in the backward from its input (saved anyway), not kept
    assert _more_work_than_eager(_ConvNeXtBlock, x) == {"gelu": (1, 2)}


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("activation", ["relu6", "hardtanh", "relu"])
def test_conv_bn_activation_conv_step_computes_nothing_eager_does_not(activation, inplace):
    # the activation's gradient reads its output, which the next convolution saves anyway: nothing is
    # recomputed in the backward, by default too (hardtanh's rule read its input, and its output was made again)
    act = {
        "relu6": lambda: torch.nn.ReLU6(inplace=inplace),
        "hardtanh": lambda: torch.nn.Hardtanh(-0.5, 0.25, inplace=inplace),
        "relu": lambda: torch.nn.ReLU(inplace=inplace),
    }[activation]

    def make():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3),
            torch.nn.BatchNorm2d(8),
            act(),
            torch.nn.Conv2d(8, 4, 1),
            torch.nn.BatchNorm2d(4),
            act(),
        )

    x = torch.randn(2, 3, 10, 10)
    assert _more_work_than_eager(make, x) == {}
    assert _more_work_than_eager(make, x, recompute="reshapes") == {}


def test_gelu_output_is_saved_not_recomputed_in_backward_with_recompute_reshapes():
    # eager saves gelu's output for the next linear's backward; recomputing it is one more gelu kernel
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    jmlp = thunder.jit(mlp, recompute="reshapes")
    jmlp(torch.randn(3, 4)).sum().backward()
    backward = str(thunder.last_backward_traces(jmlp)[-1])
    assert "gelu(" not in backward.replace("gelu_backward(", "")
    assert backward.count("gelu_backward(") == 2  # the call and its printed torch-level name


def test_first_convolution_computes_no_gradient_for_the_image():
    conv = torch.nn.Conv2d(3, 4, 3)
    jconv = thunder.jit(conv)
    x = torch.randn(2, 3, 8, 8)
    jconv(x).sum().backward()
    backward = str(thunder.last_backward_traces(jconv)[-1])
    assert "[False, True, True])" in backward
    # with an image that requires grad, its gradient is computed and equals eager's
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    conv(xe).square().sum().backward()
    jconv(xj).square().sum().backward()
    torch.testing.assert_close(xj.grad, xe.grad)
    assert "[True, True, True])" in str(thunder.last_backward_traces(jconv)[-1])


def test_llama_step_computes_nothing_eager_does_not():
    from thunder.tests.litgpt_model import GPT, Config

    config = Config.from_name("llama-tiny", n_layer=1)
    idx = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))

    class _Loss(torch.nn.Module):  # the step's loss inside the module, so that the step is model(x).square().mean()
        def __init__(self):
            super().__init__()
            self.gpt = GPT(config)

        def forward(self, idx):
            logits = self.gpt(idx)
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)), idx.reshape(-1))

    extra = _more_work_than_eager(_Loss, idx, recompute="reshapes")
    assert extra == {}, str(extra)
    # by default the extra work is elementwise values made again from saved ones (RMSNorm's products, SiLU)
    extra = _more_work_than_eager(_Loss, idx)
    assert set(extra) <= {"mul", "silu"}, str(extra)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 5), (5,), (3, 5, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_cross_entropy_saves_log_probabilities_as_eager(reduction, shape, dtype):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(shape, generator=g, dtype=dtype)
    target_shape = () if len(shape) == 1 else (shape[0], *shape[2:])
    target = torch.randint(0, 5, target_shape, generator=g)
    if target.ndim:
        target.view(-1)[0] = -100  # an ignored position

    def f(x, t):
        return F.cross_entropy(x, t, reduction=reduction)

    xe, xj = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    jf = thunder.jit(f)
    out_e, out_j = f(xe, target), jf(xj, target)
    tol = {"atol": 2e-2, "rtol": 2e-2} if dtype is torch.bfloat16 else {}
    torch.testing.assert_close(out_j, out_e, **tol)
    cot = torch.rand_like(out_e)
    out_e.backward(cot)
    out_j.backward(cot)
    torch.testing.assert_close(xj.grad, xe.grad, **tol)
    backward = str(thunder.last_backward_traces(jf)[-1])
    assert "log_softmax(" not in backward  # the log-probabilities are saved, not recomputed
    # the zeros the gradient is scattered into are made in the backward, not held from the forward
    assert "torch.full(" not in str(thunder.last_traces(jf)[-1])


def test_cross_entropy_with_all_targets_ignored_matches_eager():
    x = torch.randn(4, 3)
    t = torch.full((4,), -100)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_e = F.cross_entropy(xe, t)
    out_j = thunder.jit(F.cross_entropy)(xj, t)
    torch.testing.assert_close(out_j, out_e, equal_nan=True)
    out_e.backward()
    out_j.backward()
    torch.testing.assert_close(xj.grad, xe.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_hardswish_backward_is_eagers_one_kernel(dtype):
    x = torch.tensor([-5.0, -3.0, -2.5, -1.0, 0.0, 1.0, 2.5, 3.0, 3.5, 7.0], dtype=dtype)
    xe, xj = x.clone().requires_grad_(), x.clone().requires_grad_()
    cot = torch.linspace(-1, 2, 10, dtype=dtype)
    F.hardswish(xe * 1.0).backward(cot)
    jf = thunder.jit(lambda t: F.hardswish(t * 1.0))
    jf(xj).backward(cot)
    torch.testing.assert_close(xj.grad, xe.grad, atol=0, rtol=0)
    backward = str(thunder.last_backward_traces(jf)[-1])
    assert "hardswish_backward(" in backward and "torch.where(" not in backward
