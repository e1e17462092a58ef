"""A compiled training step runs no more PyTorch work than eager autograd does.

Each test runs one step eagerly and compiled, compares values and gradients with eager, and counts the
``aten`` operations both steps call (below autograd, by a ``TorchDispatchMode``): no operation that
computes (allocates and fills a tensor) may run more often in the compiled step than in eager's.
Operations that only describe memory (views, reshapes, strides) are not counted.
"""

from collections import Counter

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import thunder

# aten operations that make no new values (a view, a reshape of a contiguous tensor, metadata)
_METADATA_OPS = frozenset(
    "view _unsafe_view reshape expand as_strided t transpose permute squeeze unsqueeze detach alias "
    "slice select split_with_sizes split unbind empty empty_like empty_strided resize lift_fresh".split()
)


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__.rstrip("_")  # an in-place form (add_) counts as its operation (add)
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


def _more_work_than_eager(make, x) -> dict:
    """Compares a compiled step with eager's (values, gradients); the operations it calls more often."""
    torch.manual_seed(0)
    eager = make()
    torch.manual_seed(0)
    jmodel = thunder.jit(make())
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
    assert _more_work_than_eager(_ConvNeXtBlock, x) == {}


def test_gelu_output_is_saved_not_recomputed_in_backward():
    # eager saves gelu's output for the next linear's backward; recomputing it is one more gelu kernel
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    jmlp = thunder.jit(mlp)
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
