"""In-place updates through views of tensors held outside the inputs (a module-level global, a closure's
tensor) reach that tensor as in eager, as do changes of its sizes in place."""

from __future__ import annotations

import torch

import thunder

K = torch.zeros(3, 4)


def _update_global_row(x):
    K[0].add_(1)
    return x + K


def test_update_through_a_view_of_a_global_reaches_it():
    K.zero_()
    expected = _update_global_row(torch.ones(3, 4))
    expected_k = K.clone()
    K.zero_()
    jfn = thunder.jit(_update_global_row)
    assert torch.equal(jfn(torch.ones(3, 4)), expected)
    assert torch.equal(K, expected_k)
    # the cached program updates it again on the next call, as eager would
    expected_again = _update_global_row(torch.ones(3, 4))
    expected_k = K.clone()
    K.copy_(torch.tensor([[1.0] * 4, [0.0] * 4, [0.0] * 4]))
    assert torch.equal(jfn(torch.ones(3, 4)), expected_again)
    assert torch.equal(K, expected_k)


def _closure():
    c = torch.zeros(3)

    def g(x):
        c[1:].mul_(2)
        c.add_(x)
        v = c.view(3, 1)
        v[0] = 5
        w = c.unsqueeze(0).T
        w[2].sub_(x[2])
        return c * 1

    return g, c


def test_updates_through_views_of_a_closure_tensor_reach_it():
    g_eager, c_eager = _closure()
    g, c = _closure()
    jg = thunder.jit(g)
    x = torch.tensor([1.0, 2.0, 3.0])
    for _ in range(2):
        assert torch.equal(jg(x), g_eager(x))
        assert torch.equal(c, c_eager)


W = torch.arange(6.0).reshape(2, 3)


def _update_transposed_global(x):
    v = W.T
    v[0].mul_(x)
    return W.sum() * 1


def test_update_through_a_strided_view_of_a_global():
    W.copy_(torch.arange(6.0).reshape(2, 3))
    expected = _update_transposed_global(torch.tensor(3.0))
    expected_w = W.clone()
    W.copy_(torch.arange(6.0).reshape(2, 3))
    assert torch.equal(thunder.jit(_update_transposed_global)(torch.tensor(3.0)), expected)
    assert torch.equal(W, expected_w)


def test_changing_the_sizes_of_a_global_in_place_is_eagers():
    # (a tensor from outside the inputs is an input of the program: its layout changes as an argument's does)
    global K
    saved = K
    try:
        K = torch.arange(12.0).reshape(3, 4)
        expected = K.clone()

        def f(x):
            K.t_()
            return x + K[0]

        jf = thunder.jit(f)
        for _ in range(2):  # (the second call meets K transposed: it traces again)
            out = jf(torch.ones(K.shape[0]))  # (K[0] after the call has K.shape[0] elements)
            expected.t_()
            assert (K.shape, K.stride()) == (expected.shape, expected.stride())
            assert torch.equal(K, expected) and torch.equal(out, 1 + expected[0])
    finally:
        K = saved
