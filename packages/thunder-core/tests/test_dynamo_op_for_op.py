"""ThunderFX regions whose Thunder program calls PyTorch's kernels one operation at a time run their FX graph
from their second call on (``ThunderCompiler(op_for_op="graph")``, the default), against eager PyTorch."""

from __future__ import annotations

import pytest
import torch

import thunder
import thunder.torch as ltorch
from thunder.core.proxies import TensorProxy
from thunder.dynamo import thunderfx
from thunder.extend import OperatorExecutor


@pytest.fixture(autouse=True)
def reset_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def with_a_graph_break(x, w):
    y = torch.nn.functional.linear(x, w).relu()
    scale = y.mean().item()  # a graph break: two Dynamo graphs
    return torch.nn.functional.cross_entropy(y * scale, torch.zeros(y.shape[0], dtype=torch.long))


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_(t.requires_grad) for t in tensors]


def _assert_call_matches_eager(cf, fn, *inputs):
    actual_in, expected_in = _leaves(*inputs), _leaves(*inputs)
    actual, expected = cf(*actual_in), fn(*expected_in)
    torch.testing.assert_close(actual, expected)
    assert actual.requires_grad == expected.requires_grad
    if expected.requires_grad:
        actual.backward()
        expected.backward()
        for a, e in zip(actual_in, expected_in):
            torch.testing.assert_close(a.grad, e.grad)


def _thunder_regions(cf):
    return [r for info in cf.subgraph_infos for r in info.regions if r.kind == "thunder"]


def test_op_for_op_region_runs_its_graph_from_the_second_call_with_eagers_values_and_gradients():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    cf = thunderfx(with_a_graph_break)
    _assert_call_matches_eager(cf, with_a_graph_break, x, w)
    regions = _thunder_regions(cf)
    assert len(regions) == 2
    for r in regions:  # compiled and run by Thunder once, then its graph runs
        assert r.runs_graph is not None and "one operation at a time" in r.runs_graph
        assert thunder.cache_misses(r.compiled) == 1 and thunder.cache_hits(r.compiled) == 0
    region_calls = []
    for info in cf.subgraph_infos:
        for name, module in info.split_graph_module.named_children():
            module.register_forward_pre_hook(lambda *_, name=name: region_calls.append(name))
    for _ in range(2):
        _assert_call_matches_eager(cf, with_a_graph_break, x, w)
    # Thunder's programs no longer run, nor does the split graph: Dynamo's graphs run as captured
    assert all(thunder.cache_hits(r.compiled) == 0 and thunder.cache_misses(r.compiled) == 1 for r in regions)
    assert region_calls == []
    assert "runs its graph: Thunder's program calls PyTorch's kernels one operation at a time" in cf.report()


def test_op_for_op_thunder_keeps_running_thunders_program():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    cf = thunderfx(with_a_graph_break, op_for_op="thunder")
    for _ in range(3):
        _assert_call_matches_eager(cf, with_a_graph_break, x, w)
    regions = _thunder_regions(cf)
    assert regions and all(r.runs_graph is None for r in regions)
    assert all(thunder.cache_misses(r.compiled) == 1 and thunder.cache_hits(r.compiled) == 2 for r in regions)
    assert "runs its graph" not in cf.report()


def test_region_that_runs_another_executors_kernel_keeps_thunders_program():
    ex = OperatorExecutor("op_for_op_test_ex")
    calls = []

    def mul_impl(a, b):
        calls.append(1)
        return a * b

    op_for_op_test_mul = ex.register_operator("op_for_op_test_mul", meta=lambda a, b: TensorProxy(like=a), fn=mul_impl)
    ex.register_implementation(
        ltorch.mul,
        checker=lambda a, b: isinstance(a, TensorProxy) and isinstance(b, TensorProxy) and a.shape == b.shape,
        execution_transform=lambda a, b: op_for_op_test_mul(a, b),
    )

    def f(a, b):
        return (a * b).exp() + a.cos()

    cf = thunderfx(f, executors=[ex, *thunder.get_default_executors()])
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    for n in range(1, 4):
        torch.testing.assert_close(cf(a, b), f(a, b))
        assert len(calls) == n  # the executor's kernel runs on every call
    (region,) = _thunder_regions(cf)
    assert region.runs_graph is None


def test_region_with_a_transform_keeps_thunders_program():
    seen = []

    def note_transform(trace):
        seen.append(trace)
        return trace

    def f(x):
        return x.sin() * 2

    cf = thunderfx(f, transforms=[note_transform])
    x = torch.randn(3)
    for _ in range(3):
        torch.testing.assert_close(cf(x), f(x))
    (region,) = _thunder_regions(cf)
    assert region.runs_graph is None and thunder.cache_hits(region.compiled) == 2


def test_region_inside_no_grad_and_autocast_blocks_runs_its_graph_under_the_blocks_state():
    # a fallback region that is not eager's keeps the split graph, so the Thunder regions run their own graphs
    # between the grad-mode and autocast changes the split graph applies
    fallback_calls = []

    def my_backend(gm, example_inputs):
        def run(*args):
            fallback_calls.append(1)
            return gm(*args)

        return run

    def f(x, w):
        with torch.no_grad():
            frozen = (x * 3).sin()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = torch.nn.functional.linear(x, w)
        z = torch.cumprod(y.float(), 0)  # no torch-language symbol: the custom fallback
        return y, frozen, z.sum() * frozen.sum()

    cf = thunderfx(f, fallback=my_backend)
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(5, 8, requires_grad=True)
    for n in range(1, 4):
        xa, wa = _leaves(x, w)
        xe, we = _leaves(x, w)
        actual, expected = cf(xa, wa), f(xe, we)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype and a.requires_grad == e.requires_grad
            torch.testing.assert_close(a, e)
        actual[2].backward()
        expected[2].backward()
        torch.testing.assert_close(xa.grad, xe.grad)
        torch.testing.assert_close(wa.grad, we.grad)
        assert len(fallback_calls) == n  # the split graph, with its custom fallback region, keeps running
        assert torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
    regions = _thunder_regions(cf)
    assert regions and all(r.runs_graph is not None for r in regions), cf.report()


def test_in_place_update_of_an_input_in_a_region_that_runs_its_graph():
    def f(x, buf):
        buf.mul_(0.5).add_(x)  # an input updated in place, as a running statistic is
        y = x * buf
        print("a graph break")
        return y.exp()

    cf = thunderfx(f)
    x = torch.randn(6)
    buf_actual, buf_expected = torch.ones(6), torch.ones(6)
    for _ in range(3):
        torch.testing.assert_close(cf(x, buf_actual), f(x, buf_expected))
        torch.testing.assert_close(buf_actual, buf_expected)
    assert all(r.runs_graph is not None for r in _thunder_regions(cf))


def test_bad_op_for_op_option_is_named():
    with pytest.raises(ValueError, match="op_for_op='maybe'"):
        thunderfx(lambda x: x, op_for_op="maybe")
