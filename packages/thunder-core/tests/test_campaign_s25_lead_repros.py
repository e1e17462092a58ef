"""Repros of the classes campaign seeds 14101-14110 found (session 25, the lead's share), each against eager."""

from __future__ import annotations

import pytest
import torch
from differential.functions import ScaleGrad
from eager_comparison import assert_as_eager, assert_raises_as_eager

import thunder


def _permuted():
    return (
        torch.tensor([[[[0.25, -0.5]], [[1.0, 0.75]], [[-1.0, -0.5]]]], dtype=torch.float64, requires_grad=True) * 1
    ).permute(0, 2, 3, 1)


def test_function_apply_output_keeps_its_forwards_layout():
    # (14103: the output was laid out contiguously, so a .view(-1) eager refuses ran)
    assert_as_eager(lambda x: (ScaleGrad.apply(x), ScaleGrad.apply(x).sigmoid() + 1), lambda: (_permuted(),))

    def viewed(x):
        return ScaleGrad.apply(x).view(-1)

    with pytest.raises(RuntimeError) as expected:
        viewed(_permuted())
    with pytest.raises(RuntimeError) as actual:
        thunder.jit(viewed)(_permuted())
    assert str(actual.value).split("\n")[0] == str(expected.value).split("\n")[0]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (torch.div(x, 3.0, rounding_mode="trunc").unique(),),
        lambda x: ((x.mean() + 1).div_(2.0, rounding_mode="floor").unique(sorted=False),),
    ],
)
def test_backward_through_a_node_eager_cannot_differentiate_raises_as_eager(fn):
    # (14103: unique's derivative is not implemented; a rounding division before it gives its argument a zero
    # gradient, so thunder's backward dropped unique's refusal and ran)
    def make():
        return torch.tensor([1.0, 2.0, 2.0, 5.0], dtype=torch.float64, requires_grad=True)

    with pytest.raises(RuntimeError) as expected:
        fn(make())[0].sum().backward()
    out = thunder.jit(fn)(make())
    torch.testing.assert_close(out[0], fn(make())[0])
    with pytest.raises(type(expected.value)) as actual:
        out[0].sum().backward()
    assert str(actual.value).split(" (eager")[0] == str(expected.value).split("\n")[0]
    assert "test_campaign_s25_lead_repros.py" in str(actual.value)


@pytest.mark.parametrize(
    ("fn", "make"),
    [
        # (14101: eager's refusals in words thunder's list of messages did not hold)
        (
            lambda a: torch.nan_to_num(a.prod(), out=torch.empty((), dtype=torch.float64)),
            lambda: torch.tensor([2.0, 3.0], dtype=torch.bfloat16),
        ),
        (
            lambda a: torch.index_select(a, 0, torch.tensor([0]), out=torch.empty(1, dtype=torch.float64)),
            lambda: torch.tensor([1.0, 2.0], dtype=torch.float16),
        ),
    ],
    ids=["nan_to_num", "index_select"],
)
def test_out_of_another_dtype_eager_refuses_is_refused_naming_the_line(fn, make):
    assert_raises_as_eager(fn, lambda: (make(),), names_file="test_campaign_s25_lead_repros.py")


def test_out_of_another_dtype_eager_casts_into_still_runs():
    assert_as_eager(
        lambda a: (torch.add(a, 1, out=torch.empty(2, dtype=torch.float64)),),
        lambda: (torch.tensor([1.0, 2.0], dtype=torch.float16),),
        grads=False,
    )


@pytest.mark.parametrize("requires_grad", [False, True])
def test_view_of_an_output_the_executors_ran_as_a_view_shares_its_storage_as_eager(requires_grad):
    # (14112: y is laid out transposed in eager, so y.flatten() copies; the program's y, rewritten after the update
    # through y[0], is contiguous and its flatten a view: the output was copied afterwards, away from the view of it)
    def fn(x):
        y = x * 3
        y[0].fill_(1.5)
        flat = (y * 2).flatten()
        return flat.view(-1), flat

    def make():
        return (
            (torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.0, -0.5], [3.0, 2.5, -2.0]], requires_grad=requires_grad) * 1).t(),
        )

    assert_as_eager(fn, make, grads=requires_grad)


def test_index_put_of_an_empty_tensor_into_itself_raises_as_eager():
    # (14109: eager calls the tensor itself as the source a full overlap, elements or not)
    def fn(a):
        v = a[[-1, 0]]
        v.index_put_((torch.tensor([0, 0]),), v, accumulate=True)
        return v

    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        fn(torch.zeros(1, 0))
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        thunder.jit(fn)(torch.zeros(1, 0))
    same_layout = lambda a: a[[-1, 0]].index_put_((torch.tensor([0, 0]),), a[[-1, 0]].view(2, 0), accumulate=True)  # noqa: E731
    torch.testing.assert_close(thunder.jit(same_layout)(torch.zeros(1, 0)), same_layout(torch.zeros(1, 0)))


@pytest.mark.parametrize("other", [lambda v1: v1.detach(), lambda v1: v1 * 1], ids=["detached", "differentiable"])
def test_each_stale_saved_tensor_raises_where_its_gradient_comes(other):
    # (14113: two calls whose saved tensors were updated later, reaching different outputs: only the first call's
    # error was kept, so a gradient through the other's output ran where eager raises)
    def fn(a):
        v0 = a * 2
        v1 = (a.sin() + 1).reshape(-1)
        v1.fmod_(v0.view(-1))  # (saves v0's view, which clamp_ updates)
        v4 = v0.gather(0, torch.zeros_like(v0, dtype=torch.int64))  # (saves v0)
        v0.clamp_(min=0)
        return v4 * 3, other(v1)

    def make():
        return torch.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5]], dtype=torch.float64, requires_grad=True)

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fn(make())[0].sum().backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
        thunder.jit(fn)(make())[0].sum().backward()
    assert "gather" in str(info.value)


@pytest.mark.parametrize(
    "make",
    [lambda: torch.tensor(-4.8, dtype=torch.float64, requires_grad=True), lambda: torch.tensor([[2.0]])],
    ids=["0-d", "one element"],
)
def test_unique_of_at_most_one_element_has_a_size_the_program_may_read(make):
    # (14117: the size of unique_consecutive's result was read from the output at run time, so a program slicing
    # by it was refused; for one element or none it is that many whatever the value)
    def fn(a):
        v = torch.unique_consecutive(a * 2)
        w, inverse, counts = torch.unique(a, return_inverse=True, return_counts=True)
        return v[..., : v.shape[-1] // 2 + 1], w * 1, inverse, counts

    assert_as_eager(fn, lambda: (make(),), grads=False)
