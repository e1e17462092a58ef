"""A fused region writes back what the program updates in place (a BatchNorm's running statistics) itself, as
Inductor's compiled BatchNorm does, instead of returning new values for the program to copy after the call."""

from __future__ import annotations

import copy

import pytest
import torch

import thunder
from thunder.executors.torch_compile import TorchCompileExecutor, torch_compile_ex

pytestmark = pytest.mark.skipif(
    torch_compile_ex.unavailable_reason() is not None, reason="no C++ compiler for Inductor"
)

# (every region compiled, whatever its size: small tensors keep the compiles short)
any_size = TorchCompileExecutor("torch_compile_write_backs", min_region_numel=0)


def _jit(module):
    return thunder.jit(module, executors=[any_size, *thunder.get_default_executors()], fusion="wait")


def _top_level_copies(trace) -> list[str]:
    return [str(b.args[1].name) for b in trace.bound_symbols if b.sym.name == "copy_"]


def _regions(trace):
    return [b for b in trace.bound_symbols if b.sym.name.startswith("torchCompile")]


def test_batch_norm_statistics_are_written_by_the_region_and_equal_eagers():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 1)
    ).train()
    reference = copy.deepcopy(model)
    fused = _jit(model)
    for step in range(3):
        x = torch.randn(2, 3, 6, 6)
        out, expected = fused(x), reference(x)
        torch.testing.assert_close(out, expected)
        out.square().mean().backward()
        expected.square().mean().backward()
        for (name, got), want in zip(model.state_dict().items(), reference.state_dict().values()):
            torch.testing.assert_close(got, want, msg=f"{name} after step {step}")
        for got, want in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got.grad, want.grad)

    trace = thunder.last_traces(fused)[-1]
    assert _top_level_copies(trace) == []  # (no write-back left for the program)
    written = [
        s.args[1].name for r in _regions(trace) for s in r.subsymbols if s.sym.name == "copy_"
    ]  # (the region's last operations)
    assert sorted(n.rsplit("_", 1)[-1] for n in written) == ["mean", "tracked", "var"]
    assert any(r.sym.call_ctx[r.sym.name].written_inputs for r in _regions(trace))


class _Decaying(torch.nn.Module):
    """A buffer updated in place from the input (an exponential average), laid out as ``layout`` gives."""

    def __init__(self, layout):
        super().__init__()
        self.register_buffer("average", layout(torch.zeros(3, 4)))

    def forward(self, x):
        self.average.mul_(0.5).add_(x.mean(0) * 0.5)
        return torch.tanh(x * 2) + 1


@pytest.mark.parametrize(
    "layout",
    [lambda t: t, lambda t: t.t().contiguous().t()],  # (a transposed buffer: written by the region's own operations)
    ids=["contiguous", "transposed"],
)
def test_buffer_written_by_a_region_equals_eagers_in_any_layout(layout):
    model, reference = _Decaying(layout), _Decaying(layout)
    fused = _jit(model)
    for _ in range(3):
        x = torch.randn(5, 3, 4)
        torch.testing.assert_close(fused(x), reference(x))
        torch.testing.assert_close(model.average, reference.average)
    assert model.average.stride() == reference.average.stride()
    trace = thunder.last_traces(fused)[-1]
    assert _top_level_copies(trace) == []
    assert any(r.sym.call_ctx[r.sym.name].written_inputs for r in _regions(trace))


def test_an_update_read_after_the_region_is_written_back_by_the_program():
    def f(x, s):
        s.mul_(0.9).add_(0.1)
        y = torch.nn.functional.conv1d(x, s)  # (reads the new value outside the region)
        return (y * 2).relu() + 1

    s, s_ref = torch.randn(2, 3, 3), None
    s_ref = s.clone()
    x = torch.randn(1, 3, 8)
    jf = thunder.jit(f, executors=[any_size, *thunder.get_default_executors()], fusion="wait")
    for _ in range(2):
        torch.testing.assert_close(jf(x, s), f(x, s_ref))
        torch.testing.assert_close(s, s_ref)
