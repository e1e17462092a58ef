"""In-place operations are functionalised with PyTorch's semantics: updates through views, of
inputs and of module buffers are visible after the call exactly as in eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _check(fn, *args):
    eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    torch.manual_seed(0)
    expected = fn(*eager_args)
    jfn = thunder.jit(fn)
    torch.manual_seed(0)
    actual = jfn(*args)
    torch.testing.assert_close(actual, expected)
    for a, e in zip(args, eager_args):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, e)
    return jfn


def test_update_through_index_view():
    def f(x):
        x[0].add_(1)
        return x * 2

    _check(f, torch.randn(3, 4))


def test_update_through_reshape_view_reads_base():
    def f(x):
        y = x.view(-1)
        y.mul_(2)
        return x + 0

    _check(f, torch.randn(3, 4))


def test_base_update_seen_by_existing_views():
    def f(x):
        col = x[:, 1]
        row = x[2]
        x.add_(10)
        return col * 1, row * 1

    _check(f, torch.randn(3, 4))


def test_view_of_view_and_sibling_views():
    def f(x):
        a = x.t()[1:]
        b = a[0]
        b.fill_(3.0)
        c, d = x.split(2, dim=1)
        d.zero_()
        return a + 0, c + 0, x.sum()

    _check(f, torch.randn(4, 4))


def test_transpose_slice_diagonal_views():
    def f(x):
        x.diagonal().mul_(0)
        x.transpose(0, 1)[::2].sub_(1)
        x.unsqueeze(0)[0, 1].copy_(torch.arange(4.0))
        return x

    _check(f, torch.randn(4, 4))


def test_setitem_forms():
    def f(x, idx, mask):
        x[1:3, 0] = 5.0
        x[..., -1] = torch.ones(4)
        x[idx] = 0.5
        x[mask] = -1.0
        return x.sum(1)

    x = torch.randn(4, 4)
    _check(f, x, torch.tensor([0, 2]), torch.randn(4, 4) > 1)


def test_functional_inplace_flag_updates_input():
    def f(x, y):
        F.relu(x, inplace=True)
        F.silu(y, inplace=True)
        F.dropout(y, 0.0, inplace=True)
        return x + y

    _check(f, torch.randn(5), torch.randn(5))


def test_input_updated_and_returned_alias():
    def f(x):
        x.mul_(3).add_(1)
        return x

    jfn = _check(f, torch.randn(3))
    trace = str(thunder.last_traces(jfn)[-1])
    assert "copy_" in trace  # the update is written back to the caller's tensor


def test_dtype_cast_on_inplace_and_error():
    def f(x, y):
        x.add_(y)  # float64 result written into float32
        return x

    _check(f, torch.randn(3), torch.randn(3, dtype=torch.float64))

    def g(i, y):
        i.add_(y)
        return i

    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        thunder.jit(g)(torch.ones(3, dtype=torch.long), torch.randn(3))


def test_optimizer_style_updates():
    def adam_step(p, g, m, v):
        m.lerp_(g, 0.1)
        v.mul_(0.999).addcmul_(g, g, value=0.001)
        denom = v.sqrt().add_(1e-8)
        p.mul_(1 - 1e-2 * 0.1)
        p.addcdiv_(m, denom, value=-1e-2)
        return p

    _check(adam_step, torch.randn(6), torch.randn(6), torch.randn(6), torch.rand(6))


def test_index_and_scatter_inplace():
    def f(x, idx, src):
        x.index_copy_(0, idx, src)
        x.index_add_(1, torch.tensor([0, 0, 2]), torch.ones(4, 3))
        x.scatter_add_(0, torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3))
        x.masked_fill_(x > 1.5, 0.0)
        return x

    _check(f, torch.randn(4, 3), torch.tensor([3, 1]), torch.randn(2, 3))


def test_module_buffer_updates():
    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))
            self.register_buffer("cache", torch.zeros(2, 4))
            self.bn = torch.nn.BatchNorm1d(4)

        def forward(self, x, pos: int):
            self.count += 1
            self.cache[:, pos] = x[:, pos]
            return self.bn(x) + self.cache.sum()

    torch.manual_seed(0)
    m = Counter()
    eager = Counter()
    eager.load_state_dict(m.state_dict())
    jm = thunder.jit(m)
    x = torch.randn(2, 4)
    for pos in (1, 3):
        with torch.no_grad():
            torch.testing.assert_close(jm(x, pos), eager(x, pos))
    for (name, a), (_, b) in zip(m.state_dict().items(), eager.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    assert m.count.item() == 2


def test_random_inplace_follows_seed():
    def f(x):
        x.uniform_(-1, 1)
        n = torch.empty(3).normal_(2.0, 0.5)
        return x, n, torch.randint(0, 5, (4,)), torch.bernoulli(torch.full((4,), 0.5))

    _check(f, torch.empty(5))


def test_input_written_back_with_another_inputs_value_before_its_update():
    # b.copy_(a) gives b a's value as called; a's own update is written back only after b's
    def f(a, b):
        b.copy_(a)
        a.mul_(a)
        return b.detach()

    _check(f, torch.randn(1, 3), torch.randn(1, 3))

    def two_readers(a, b, c):
        b.copy_(a)
        c.copy_(a.t().t())
        a.add_(1)
        return b + c

    _check(two_readers, torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))
    # (broadcast: b's new value is an expand of a)
    _check(f, torch.randn(3), torch.randn(2, 3))


_GLOBAL_BUFFER = torch.zeros(3)


def test_constant_written_back_with_an_inputs_value_before_its_update():
    def f(a):
        _GLOBAL_BUFFER.copy_(a)
        a.mul_(3)
        return a + 1

    a = torch.randn(3)
    expected_a = a * 3
    _GLOBAL_BUFFER.zero_()
    thunder.jit(f)(a)
    torch.testing.assert_close(a, expected_a)
    torch.testing.assert_close(_GLOBAL_BUFFER, expected_a / 3)


def test_view_of_a_tensor_filled_by_copy_from_a_differently_laid_out_source():
    # x.copy_(src) gives x src's values, which the program may hold in src's layout (an expand, a strided
    # slice): x.view(...) must still give eager's values, not view's layout error
    def broadcast_source(a):
        x = torch.zeros(2, 3)
        x.copy_(a)
        return x.view(-1) * 2

    def strided_source(a, b):
        x = b[[2, 0]]
        x.copy_(a[::2])
        x.view(-1).add_(1)
        return x.view_as(torch.empty(4)) * 2

    _check(broadcast_source, torch.randn(3))
    _check(strided_source, torch.randn(3, 2), torch.randn(3, 2))
