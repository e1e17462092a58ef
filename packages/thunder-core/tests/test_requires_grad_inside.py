"""``x.requires_grad_()`` of a tensor computed inside the jitted function (issue 25: it was ignored, so what was
computed from it did not require grad and no gradient reached the parameters it fed).

Eager makes such a tensor a leaf requiring grad: what is computed from it afterwards requires grad and carries a
history. Returning that leaf (whose ``.grad`` eager fills) or making a view a leaf is refused, naming the line.
"""

from __future__ import annotations

import pytest
import torch

import thunder
from thunder.tracing.errors import TracingError


def _meta(outs):
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [(o.requires_grad, o.is_leaf, o.dtype) for o in outs]


def _made_leaf_then_sin(a):
    y = a * 2
    y.requires_grad_()
    return y.sin()


def _made_leaf_then_scaled(a, w):
    y = a * 2
    y.requires_grad_(True)
    return (y * w).sum(), a + 1


def _made_leaf_under_no_grad(a, w):
    with torch.no_grad():
        y = a.exp()
        y.requires_grad_()
    return y * w


def _made_leaf_and_back(a):
    y = a * 2
    y.requires_grad_()
    y.requires_grad_(False)
    return y.sin()


def _made_leaf_is_leaf(a):
    y = a.cos()
    y.requires_grad_()
    return y * 3, y.is_leaf, y.grad_fn is None


_CASES = {
    "computed tensor": (_made_leaf_then_sin, lambda: (torch.randn(3, 4),)),
    "expanded argument": (_made_leaf_then_sin, lambda: (torch.randn(4).expand(3, 4),)),
    "with a parameter": (_made_leaf_then_scaled, lambda: (torch.randn(3), torch.randn(3, requires_grad=True))),
    "made under no_grad": (_made_leaf_under_no_grad, lambda: (torch.randn(3), torch.randn(3, requires_grad=True))),
    "requires_grad_(False) after": (_made_leaf_and_back, lambda: (torch.randn(3),)),
    "is_leaf": (_made_leaf_is_leaf, lambda: (torch.randn(3),)),
}


@pytest.mark.parametrize("fn, make", _CASES.values(), ids=_CASES.keys())
def test_requires_grad_of_a_computed_tensor_matches_eager(fn, make):
    torch.manual_seed(0)
    expected_args = make()
    torch.manual_seed(0)
    actual_args = make()
    expected = fn(*expected_args)
    actual = thunder.jit(fn)(*actual_args)
    e_t = expected if isinstance(expected, tuple) else (expected,)
    a_t = actual if isinstance(actual, tuple) else (actual,)
    tensors = [(e, a) for e, a in zip(e_t, a_t) if isinstance(e, torch.Tensor)]
    assert [x for x in e_t if not isinstance(x, torch.Tensor)] == [x for x in a_t if not isinstance(x, torch.Tensor)]
    assert _meta(tuple(e for e, _ in tensors)) == _meta(tuple(a for _, a in tensors))
    for e, a in tensors:
        torch.testing.assert_close(a, e)
    grad_out = [(e, a) for e, a in tensors if e.requires_grad]
    if grad_out:
        sum(e.sum() for e, _ in grad_out).backward()
        sum(a.sum() for _, a in grad_out).backward()
    for e, a in zip(expected_args, actual_args):
        if e.requires_grad:
            torch.testing.assert_close(a.grad, e.grad)


class _FrozenEmbeddingModel(torch.nn.Module):
    """HF's ``enable_input_require_grads``: a forward hook makes the frozen embedding's output require grad."""

    def __init__(self, train_head: bool):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.embed.weight.requires_grad_(False)
        self.proj = torch.nn.Linear(4, 4)
        self.proj.weight.requires_grad_(False)
        self.proj.bias.requires_grad_(False)
        self.head = torch.nn.Linear(4, 2).requires_grad_(train_head)
        self.embed.register_forward_hook(lambda module, inputs, output: output.requires_grad_(True))

    def forward(self, ids):
        return self.head(torch.relu(self.proj(self.embed(ids))))


@pytest.mark.parametrize("train_head", [True, False])
def test_enable_input_require_grads_hook_matches_eager(train_head):
    torch.manual_seed(0)
    model = _FrozenEmbeddingModel(train_head)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    expected = model(ids)
    jm = thunder.jit(model)
    actual = jm(ids)
    assert _meta(actual) == _meta(expected) and actual.grad_fn is not None
    torch.testing.assert_close(actual, expected)
    expected.sum().backward()
    grads = [p.grad for p in model.head.parameters()]
    model.zero_grad(set_to_none=True)
    actual.sum().backward()
    for g, p in zip(grads, model.head.parameters()):
        torch.testing.assert_close(p.grad, g)  # (None for a frozen head, in both)


def test_eager_errors_of_requires_grad_inside():
    with pytest.raises(RuntimeError, match="only Tensors of floating point"):
        thunder.jit(lambda a: (a + 1).requires_grad_())(torch.ones(2, dtype=torch.int64))
    with pytest.raises(RuntimeError, match="only change requires_grad flags of leaf variables"):
        thunder.jit(lambda a: (a * 2).requires_grad_(False))(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad is being used in an in-place"):
        thunder.jit(lambda a: (a * 2).requires_grad_().mul_(2))(torch.ones(2))


def _returns_the_made_leaf(a):
    y = a * 2
    y.requires_grad_()
    return y.sin(), y


def _view_made_a_leaf(a):
    v = a[0]
    v.requires_grad_()
    return v * 2


@pytest.mark.parametrize("fn", [_returns_the_made_leaf, _view_made_a_leaf])
def test_what_thunder_does_not_model_is_refused_naming_the_line(fn):
    fn(torch.randn(3, 4))  # (eager runs it)
    with pytest.raises(TracingError, match=r"(?s)thunder\.jit cannot .*test_requires_grad_inside\.py"):
        thunder.jit(fn)(torch.randn(3, 4))
