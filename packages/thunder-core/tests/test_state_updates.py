"""State updates run in place when their only use is the write-back (``thunder.executors.state_updates``).

Each test runs the same module or function in eager and through thunder.jit and compares what the caller
sees (outputs, gradients, the module's buffers and their version counters) bit for bit; the trace tests
check which calls the compiled program makes.
"""

from __future__ import annotations

import copy

import pytest
import torch

import thunder


def _program_source(jfn) -> str:
    return str(thunder.last_traces(jfn)[-1])


def _conv_bn(track: bool = True) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4, track_running_stats=track), torch.nn.ReLU()
    )


def _assert_same_state(eager: torch.nn.Module, ours: torch.nn.Module, *, versions: bool = False) -> None:
    for (name, e), o in zip(eager.state_dict().items(), ours.state_dict().values()):
        assert torch.equal(e, o), name
    if versions:  # the in-place kernels bump the buffers' version counters as eager's do
        for (name, e), o in zip(eager.named_buffers(), ours.buffers()):
            assert e._version == o._version, f"{name}: version {o._version}, eager {e._version}"


@pytest.mark.parametrize("grad", [True, False], ids=["training_step", "no_grad"])
def test_batch_norm_updates_its_running_statistics_in_place_as_eager(grad):
    eager = _conv_bn()
    ours = copy.deepcopy(eager)
    jm = thunder.jit(ours)
    x = torch.randn(2, 3, 8, 8)
    for _ in range(3):
        with torch.set_grad_enabled(grad):
            e, o = eager(x), jm(x)
        torch.testing.assert_close(o, e)
        if grad:
            e.square().sum().backward()
            o.square().sum().backward()
    _assert_same_state(eager, ours, versions=True)
    if grad:
        for (name, pe), po in zip(eager.named_parameters(), ours.parameters()):
            torch.testing.assert_close(po.grad, pe.grad, msg=name)
    src = _program_source(jm)
    kernel = "torch.ops.aten._native_batch_norm_legit(" if grad else "torch.nn.functional.batch_norm("
    # the in-place kernel and counter increment, and no write-back copy left in the program's own lines
    assert kernel in src and "Tensor.add_(t_1_num_batches_tracked, 1)" in src
    assert not [line for line in src.splitlines() if line.lstrip().startswith("copy_(")]


def test_a_module_whose_batch_norm_runs_twice_reads_the_first_update():
    # the second call reads the statistics the first call wrote: that value is no write-back only
    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(self.bn(x) * 2)

    eager = Twice()
    ours = copy.deepcopy(eager)
    jm = thunder.jit(ours)
    x = torch.randn(5, 3)
    for _ in range(2):
        torch.testing.assert_close(jm(x), eager(x))
    _assert_same_state(eager, ours)


def test_a_buffer_the_program_also_returns_is_copied_back_not_updated_in_place():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("calls", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            self.calls += 1
            return x * 2, self.calls.clone()

    eager = Counter()
    ours = copy.deepcopy(eager)
    jm = thunder.jit(ours)
    x = torch.randn(3)
    for _ in range(3):
        (e, ce), (o, co) = eager(x), jm(x)
        torch.testing.assert_close(o, e)
        assert torch.equal(co, ce)
    _assert_same_state(eager, ours)


def test_an_increment_of_an_argument_runs_in_place():
    def f(x, step):
        step.add_(1)
        return x * 2

    x = torch.randn(3)
    se, so = torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64)
    jf = thunder.jit(f)
    for _ in range(3):
        torch.testing.assert_close(jf(x, so), f(x, se))
    assert torch.equal(so, se) and so._version == se._version
    assert "Tensor.add_(step, 1)" in _program_source(jf)


def test_an_update_whose_result_is_cast_back_keeps_its_write_back():
    # float16 += float32 has a float32 result, which eager's in-place op casts back: so does the write-back
    def f(a, b):
        a.add_(b)
        return b + 1

    make = lambda: (torch.linspace(0, 1, 4, dtype=torch.float16), torch.full((4,), 1 / 3))  # noqa: E731
    (ae, be), (ao, bo) = make(), make()
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(ao, bo), f(ae, be))
    assert torch.equal(ao, ae) and ao.dtype == ae.dtype
    assert "Tensor.add_(" not in _program_source(jf)


def test_updates_of_arguments_that_share_a_storage_stay_as_eager():
    # a and b share a storage: the program sees them as views of it, so no update runs in place on an argument
    def f(a, b):
        a.add_(1)
        return b * 3

    base_e, base_o = torch.arange(6.0), torch.arange(6.0)
    jf = thunder.jit(f)
    torch.testing.assert_close(jf(base_o[:4], base_o[2:]), f(base_e[:4], base_e[2:]))
    assert torch.equal(base_o, base_e)


class _Cache(torch.nn.Module):
    """A KV-cache-like buffer written at one position per call through a view of the whole batch."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.zeros(2, 3, 8, 4))

    def forward(self, pos, k):
        full = self.k[: k.shape[0], ...].index_copy_(-2, pos, k)
        return torch.softmax(full.sum(-1), -1).repeat_interleave(2, dim=1)


def test_a_cache_written_at_one_position_is_updated_in_place_not_copied_whole():
    eager = _Cache()
    ours = copy.deepcopy(eager)
    jm = thunder.jit(ours)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in range(4):
            pos, k = torch.tensor([p]), torch.randn(2, 3, 1, 4)
            torch.testing.assert_close(jm(pos, k), eager(pos, k))
            assert torch.equal(ours.k, eager.k)
    # one in-place index_copy_, no copy of the whole cache and no scatter over its every position
    calls = [line.strip() for line in _program_source(jm).splitlines() if not line.lstrip().startswith("#")]
    assert any(c.startswith("t") and "= Tensor.index_copy_(t_k, -2, pos, k)" in c for c in calls)
    assert not [c for c in calls if "scatter" in c or "iota" in c or c.startswith("copy_(")]


@pytest.mark.parametrize(
    "read", [lambda b: b, lambda b: b[1:], lambda b: b.t()], ids=["returned", "returned_slice", "transposed"]
)
def test_an_updated_value_the_program_returns_a_view_of_is_not_made_the_input(read):
    # eager returns (a view of) the updated buffer; thunder's write-back path gives the same values, and a
    # returned fresh tensor is never turned into the caller's buffer by running the update in place
    def f(buf, x):
        buf.add_(x)
        return read(buf) * 1, read(buf)

    make = lambda: (torch.arange(6.0).reshape(2, 3), torch.ones(3))  # noqa: E731
    (be, xe), (bo, xo) = make(), make()
    jf = thunder.jit(f)
    (e0, e1), (o0, o1) = f(be, xe), jf(bo, xo)
    torch.testing.assert_close(o0, e0)
    torch.testing.assert_close(o1, e1)
    assert torch.equal(bo, be)
    o0.zero_()  # a fresh result in eager: writing it leaves the buffer alone
    assert torch.equal(bo, be)


def test_an_update_read_through_views_runs_in_place_unless_backward_saves_a_view():
    def f(buf, w):
        buf.add_(1)
        return buf.t() @ w

    make = lambda grad: (torch.arange(6.0).reshape(2, 3), torch.ones(2, 4, requires_grad=grad))  # noqa: E731
    for grad in (False, True):
        (be, we), (bo, wo) = make(grad), make(grad)
        jf = thunder.jit(f)
        e, o = f(be, we), jf(bo, wo)
        torch.testing.assert_close(o, e)
        assert torch.equal(bo, be)
        calls = [c.strip() for c in _program_source(jf).splitlines() if not c.lstrip().startswith("#")]
        in_place = any("Tensor.add_(buf, 1)" in c for c in calls)
        # without grad the view only feeds the matmul; with grad the backward saves buf.t() for w's gradient,
        # which must keep the value of this call, not become a view of the caller's buffer
        assert in_place is not grad
        if grad:
            e.sum().backward()
            o.sum().backward()
            torch.testing.assert_close(wo.grad, we.grad)


def test_a_write_through_a_view_laid_out_as_its_root_keeps_the_autograd_of_a_view_output():
    # fuzzer repro: v.t() is laid out as a0 itself; the output v, a view of the updated a0, must backprop as in eager
    def fn(a0):
        v = a0.permute(1, 0)
        v.t().copy_(a0)
        return v

    def make():
        leaf = torch.linspace(-1, 1, 9, dtype=torch.float64).reshape(3, 3).requires_grad_()
        return leaf, (leaf * 1)[::2]

    (le, e_in), (lo, o_in) = make(), make()
    e, o = fn(e_in), thunder.jit(fn)(o_in)
    torch.testing.assert_close(o, e)
    (e * torch.arange(6.0, dtype=torch.float64).reshape(3, 2)).sum().backward()
    (o * torch.arange(6.0, dtype=torch.float64).reshape(3, 2)).sum().backward()
    torch.testing.assert_close(lo.grad, le.grad)
