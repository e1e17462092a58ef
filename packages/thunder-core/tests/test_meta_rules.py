"""Ops PyTorch has no meta kernel for (torch.linalg.lstsq, F.ctc_loss) run opaquely with thunder's shape
rules (thunder.torch.meta_rules): values, dtypes, requires_grad and gradients against eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunder


def _compare(actual, expected):
    actual = actual if isinstance(actual, tuple) else (actual,)
    expected = expected if isinstance(expected, tuple) else (expected,)
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype and a.requires_grad == e.requires_grad
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 5), (3, 2)), ((2, 4, 4), (1, 4, 3)), ((5, 3), (5,)), ((5, 3), (5, 2)), ((2, 5, 3), (2, 5, 2))],
)
def test_lstsq_matches_eager(driver, a_shape, b_shape):
    torch.manual_seed(0)
    A = torch.randn(a_shape, dtype=torch.float64, requires_grad=True)
    B = torch.randn(b_shape, dtype=torch.float64, requires_grad=True)
    fn = lambda A, B: tuple(torch.linalg.lstsq(A, B, driver=driver))  # noqa: E731
    tall = a_shape[-2] > a_shape[-1]
    if tall and driver in ("gelsd", "gelss") and len(a_shape) > 2:  # (one matrix: a size read at run time)
        with pytest.raises(thunder.DataDependentControlFlowError, match="residuals") as info:
            thunder.jit(fn)(A, B)
        assert "test_meta_rules.py" in str(info.value)  # the user's line
        return
    expected = fn(A, B)
    jfn = thunder.jit(fn)
    actual = jfn(A, B)
    _compare(actual, expected)
    if tall and driver in ("gelsd", "gelss"):  # rank-deficient: eager gives no residuals, with the same program
        A0 = torch.cat([A[..., :1], A[..., :1], A[..., 2:]], -1).detach().requires_grad_()
        _compare(jfn(A0, B), fn(A0, B))
        assert fn(A0, B)[1].shape == (0,)
    # the solution's and the residuals' gradients (eager differentiates both)
    loss = lambda out: out[0].sum() + out[1].sum() * 0.5  # noqa: E731
    e_grads = torch.autograd.grad(loss(expected), (A, B))
    a_grads = torch.autograd.grad(loss(actual), (A, B))
    for a, e in zip(a_grads, e_grads):
        torch.testing.assert_close(a, e)


def test_lstsq_rejects_what_eager_rejects():
    A, B = torch.randn(4, 3), torch.randn(4, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.linalg.lstsq(A, B)
    with pytest.raises(RuntimeError, match="same dtype"):
        thunder.jit(torch.linalg.lstsq)(A, B)
    with pytest.raises(RuntimeError, match="should match"):
        thunder.jit(torch.linalg.lstsq)(A, torch.randn(5, 2))


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("lengths_as", ["tensor", "tuple"])
def test_ctc_loss_matches_eager(reduction, lengths_as):
    torch.manual_seed(0)
    T, N, C, S = 12, 3, 5, 4
    log_probs = torch.randn(T, N, C, dtype=torch.float64).log_softmax(2).detach().requires_grad_()
    targets = torch.randint(1, C, (N, S))
    input_lengths, target_lengths = torch.tensor([12, 10, 11]), torch.tensor([4, 2, 3])
    if lengths_as == "tuple":
        input_lengths, target_lengths = tuple(input_lengths.tolist()), tuple(target_lengths.tolist())

    def fn(lp, t):
        return F.ctc_loss(lp, t, input_lengths, target_lengths, reduction=reduction)

    expected = fn(log_probs, targets)
    actual = thunder.jit(fn)(log_probs, targets)
    _compare(actual, expected)
    cot = torch.randn_like(expected)
    torch.testing.assert_close(
        torch.autograd.grad(actual, log_probs, cot)[0], torch.autograd.grad(expected, log_probs, cot)[0]
    )


def test_ctc_loss_unbatched_matches_eager():
    torch.manual_seed(0)
    log_probs = torch.randn(10, 6).log_softmax(1)
    targets = torch.randint(1, 6, (4,))
    fn = lambda lp, t: F.ctc_loss(lp, t, (10,), (4,), reduction="none")  # noqa: E731
    _compare(thunder.jit(fn)(log_probs, targets), fn(log_probs, targets))


@pytest.mark.parametrize("center", [True, False])
@pytest.mark.parametrize(
    "kwargs",
    [
        {"n_fft": 8},
        {"n_fft": 8, "hop_length": 3, "length": 11},
        {"n_fft": 10, "win_length": 8, "onesided": False, "return_complex": True},
        {"n_fft": 8, "window": "hann"},
    ],
)
@pytest.mark.parametrize("batched", [False, True])
def test_istft_matches_eager(kwargs, center, batched):
    torch.manual_seed(0)
    kwargs = dict(kwargs, center=center)
    if kwargs.get("window") == "hann":
        kwargs["window"] = torch.hann_window(8, dtype=torch.float64) + 0.1
    onesided = kwargs.get("onesided", True)
    freq = kwargs["n_fft"] // 2 + 1 if onesided else kwargs["n_fft"]
    x = torch.randn(((2,) if batched else ()) + (freq, 5), dtype=torch.complex128, requires_grad=True)
    fn = lambda x: torch.istft(x, **kwargs)  # noqa: E731
    try:
        expected = fn(x)
    except RuntimeError:
        with pytest.raises(RuntimeError):
            thunder.jit(fn)(x)
        return
    actual = thunder.jit(fn)(x)
    _compare(actual, expected)
    cot = torch.randn_like(expected)
    torch.testing.assert_close(torch.autograd.grad(actual, x, cot)[0], torch.autograd.grad(expected, x, cot)[0])


def test_istft_rejects_a_real_input_as_eager():
    x = torch.randn(5, 4)
    with pytest.raises(RuntimeError, match="complex-valued"):
        torch.istft(x, 8)
    with pytest.raises(RuntimeError, match="complex-valued"):
        thunder.jit(lambda x: torch.istft(x, 8))(x)


def _one_hot_sum(x):
    return torch.nn.functional.one_hot(x).sum(0), torch.nn.functional.one_hot(x).shape[-1]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.one_hot(x),
        lambda x: F.one_hot(x, 7),
        lambda x: F.one_hot(x).float() * 2,
        _one_hot_sum,
    ],
)
def test_one_hot_matches_eager_with_the_class_count_read_at_run_time(fn):
    jfn = thunder.jit(fn)
    # the same shapes with other largest values: one program, the class count read from the output each call
    for x in (torch.tensor([0, 2, 1]), torch.tensor([5, 1, 1]), torch.tensor([[3, 4], [0, 1]])):
        expected, actual = fn(x), jfn(x)
        if isinstance(expected, tuple):
            assert actual[1] == expected[1]
            expected, actual = expected[0], actual[0]
        assert actual.shape == expected.shape and actual.dtype == expected.dtype
        assert torch.equal(actual, expected)


def test_one_hot_rejects_what_eager_rejects():
    for x in (torch.tensor([], dtype=torch.long), torch.tensor([1.0, 2.0])):
        with pytest.raises(RuntimeError) as eager:
            F.one_hot(x)
        with pytest.raises(RuntimeError) as jitted:
            thunder.jit(lambda x: F.one_hot(x))(x)
        assert str(eager.value) in str(jitted.value)
