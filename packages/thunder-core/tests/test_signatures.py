"""Every torch callable mapped to a thunder symbol accepts PyTorch's own argument names."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.core.symbol import Symbol
from thunder.torch.registry import InplaceOp, torch_to_thunder
from thunder.torch.signatures import _torch_signatures, kwarg_translation


def _mapped_pairs():
    for func, mapped in list(torch_to_thunder.items()):
        sym = mapped.fn if type(mapped) is InplaceOp else mapped
        if type(sym) is Symbol and func is not sym:
            yield func, sym


def test_every_torch_argument_name_reaches_the_symbol():
    """For each torch callable mapped to a symbol, each argument name in PyTorch's signatures (ATen
    schemas, or the Python signature) is a parameter of the symbol, is translated to the symbol's
    parameter at the same position, or is one the symbol may drop at PyTorch's default."""
    gaps = []
    checked = 0
    for func, sym in _mapped_pairs():
        sigs = _torch_signatures(func)
        assert sigs, f"no PyTorch signature known for {func}"
        t = kwarg_translation(func, sym)
        if t.var_kw:
            continue
        checked += 1
        for name in {n for sig in sigs for n, _, _ in sig}:
            if name not in t.accepted and name not in t.rename and name not in t.defaults_torch:
                gaps.append(f"{getattr(func, '__qualname__', func)} -> {sym.name}: {name}")
    assert checked > 300
    assert not gaps, "\n".join(gaps)


def test_translation_targets_are_positionally_consistent():
    """A renamed keyword lands on the symbol's parameter at the position PyTorch gives it."""
    t = kwarg_translation(torch.baddbmm, torch_to_thunder[torch.baddbmm])
    assert t.rename["batch1"] == t.positional[1] and t.rename["batch2"] == t.positional[2]
    t = kwarg_translation(F.scaled_dot_product_attention, torch_to_thunder[F.scaled_dot_product_attention])
    assert [t.rename[n] for n in ("query", "key", "value")] == t.positional[:3]


x = torch.randn(2, 3, 4)
b1, b2 = torch.randn(2, 3, 5), torch.randn(2, 5, 4)
idx = torch.tensor([[0, 2, 1]])

CALLS = {
    "baddbmm": lambda: torch.baddbmm(x, batch1=b1, batch2=b2, beta=0.5, alpha=2.0),
    "Tensor.baddbmm": lambda: x.baddbmm(batch1=b1, batch2=b2),
    "sdpa": lambda: F.scaled_dot_product_attention(query=x[None], key=x[None], value=x[None], is_causal=True),
    "flip": lambda: torch.flip(x, dims=(0, 2)),
    "Tensor.flip": lambda: x.flip(dims=[1]),
    "norm out=None": lambda: torch.norm(x, p=2, dim=1, out=None),
    "vector_norm ord": lambda: torch.linalg.vector_norm(x, ord=2, dim=-1),
    "add input/other": lambda: torch.add(input=x, other=x, alpha=2),
    "matmul input/other": lambda: torch.matmul(input=x, other=b2.transpose(1, 2)),
    "linear input/weight": lambda: F.linear(input=x, weight=torch.ones(2, 4)),
    "softmax input": lambda: torch.softmax(input=x, dim=-1),
    "swapdims dim0/dim1": lambda: torch.swapdims(x, dim0=0, dim1=2),
    "cat out=None": lambda: torch.cat([x, x], dim=0, out=None),
    "layer_norm input": lambda: F.layer_norm(input=x, normalized_shape=(4,)),
    "reshape shape": lambda: torch.reshape(input=x, shape=(6, 4)),
    "Tensor.permute dims": lambda: x.permute(dims=(2, 0, 1)),
    "Tensor.view size": lambda: x.view(size=(6, 4)),
    "Tensor.expand size": lambda: x[:1].expand(size=(3, 3, 4)),
    "gather sparse_grad=False": lambda: torch.gather(x[0], 1, idx.expand(3, 3), sparse_grad=False),
    "one_hot input": lambda: F.one_hot(input=idx, num_classes=4),
    "topk k/largest": lambda: torch.topk(x, k=2, largest=False).values,
    "split split_size_or_sections": lambda: torch.split(x, split_size_or_sections=2, dim=2)[1],
    "Tensor.add_ other": lambda: x.clone().add_(other=x, alpha=3),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_pytorch_keyword_names_match_eager(name):
    f = CALLS[name]
    expected = f()
    jf = thunder.jit(lambda: f())
    torch.testing.assert_close(jf(), expected)
    # the call reached a thunder symbol (it did not fall back to running PyTorch opaquely)
    assert not [r["fn"] for r in thunder.last_interpreter_log(jf) if r["symbol"] == "fallback"]


def test_keyword_without_a_counterpart_runs_pytorch_opaquely():
    """A keyword the symbol cannot express (a non-default value) still gives eager's result."""

    def f(a):
        return torch.nn.functional.layer_norm(a, (4,), eps=1e-3) + torch.sort(a, dim=-1, stable=True).values

    a = torch.randn(3, 4)
    torch.testing.assert_close(thunder.jit(f)(a), f(a))
