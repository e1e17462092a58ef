"""add, sub, mul, true_divide and neg on bfloat16/float16 (and mixed-dtype) operands: the backward runs
the operations in the operands' dtype, as eager autograd does, with no float32 round trips.

Gradients are compared with eager's bit for bit (the rules compute what eager's backward formulas
compute, in the same dtype and order); the backward traces are checked for conversions.
"""

import pytest
import torch

import thunder

LOW = [torch.bfloat16, torch.float16]


def _grads(fn, inputs, seed):
    """Output and gradients of every input that requires grad, eager and compiled, on copies of ``inputs``."""
    results = []
    jfn = thunder.jit(fn)
    for f in (fn, jfn):
        xs = [x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x for x in inputs]
        out = f(*xs)
        leaves = [x for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        grads = torch.autograd.grad(out, leaves, seed)
        results.append((out, grads))
    return results, jfn


def _assert_same(results):
    (eager_out, eager_grads), (out, grads) = results
    assert out.dtype == eager_out.dtype
    torch.testing.assert_close(out, eager_out, rtol=0, atol=0)
    for g, e in zip(grads, eager_grads, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=0, atol=0)


def _conversions(jfn) -> list[str]:
    """The lines of the last backward program that convert a dtype."""
    src = str(thunder.last_backward_traces(jfn)[-1])
    return [
        line
        for line in src.splitlines()
        if not line.lstrip().startswith("#") and (".to(" in line or "convert_element_type(" in line)
    ]


def _inputs(dtype, *shapes, grad=(True, True)):
    torch.manual_seed(0)
    return [torch.randn(s, dtype=dtype).requires_grad_(r) for s, r in zip(shapes, grad)]


OPS = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "sub": lambda a, b: a - b,
    "sub_alpha": lambda a, b: torch.sub(a, b, alpha=0.5),
    "mul": lambda a, b: a * b,
    "true_divide": lambda a, b: a / (b.abs() + 0.5),
    "neg_mul": lambda a, b: -a * b,
}


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("shapes", [((4, 6), (4, 6)), ((3, 4, 6), (1, 6)), ((6,), (5, 1, 6))], ids=str)
def test_reduced_precision_gradients_equal_eager_bitwise(op, dtype, shapes):
    inputs = _inputs(dtype, *shapes)
    out_shape = torch.broadcast_shapes(*shapes)
    seed = torch.randn(out_shape, dtype=dtype)
    results, jfn = _grads(OPS[op], inputs, seed)
    _assert_same(results)
    if op != "true_divide":  # (its .abs() + 0.5 is a separate operation; the check is for the rules' own ops)
        assert _conversions(jfn) == []


@pytest.mark.parametrize("dtype", LOW)
def test_python_number_operands(dtype):
    (a,) = _inputs(dtype, (5, 7), grad=(True,))
    fn = lambda a: (2.5 * a - 1.25) / 3.0 + (0.75 - a) * a  # noqa: E731
    results, jfn = _grads(fn, [a], torch.randn(5, 7, dtype=dtype))
    _assert_same(results)
    assert _conversions(jfn) == []


@pytest.mark.parametrize(("da", "db"), [(torch.bfloat16, torch.float32), (torch.float32, torch.float16)])
@pytest.mark.parametrize("op", ["add", "sub_alpha", "mul", "true_divide"])
def test_mixed_dtypes_give_each_operand_its_own_dtype(op, da, db):
    torch.manual_seed(0)
    a = torch.randn(3, 4, dtype=da, requires_grad=True)
    b = torch.randn(4, dtype=db, requires_grad=True)
    results, _ = _grads(OPS[op], [a, b], torch.randn(3, 4, dtype=torch.promote_types(da, db)))
    _assert_same(results)


def test_zero_dim_operand_of_another_dtype():
    torch.manual_seed(0)
    a = torch.randn(3, 4, dtype=torch.bfloat16, requires_grad=True)
    s = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    results, _ = _grads(lambda a, s: a * s + s, [a, s], torch.randn(3, 4, dtype=torch.bfloat16))
    _assert_same(results)


def test_operand_without_grad_gets_no_backward_work():
    torch.manual_seed(0)
    a = torch.randn(8, 8, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(8, 8, dtype=torch.bfloat16)
    results, jfn = _grads(lambda a, b: a * b, [a, b], torch.randn(8, 8, dtype=torch.bfloat16))
    _assert_same(results)
    src = str(thunder.last_backward_traces(jfn)[-1])
    body = [line for line in src.splitlines() if "torch.mul(" in line and not line.lstrip().startswith("#")]
    assert len(body) == 1, src


def test_in_place_updates_in_reduced_precision():
    def fn(a, b):
        c = a * 1.0
        c.mul_(b)
        c.add_(b, alpha=2)
        c.sub_(a)
        return c

    inputs = _inputs(torch.bfloat16, (4, 5), (4, 5))
    results, jfn = _grads(fn, inputs, torch.randn(4, 5, dtype=torch.bfloat16))
    _assert_same(results)
    assert _conversions(jfn) == []


def test_float32_backward_is_unchanged_by_the_rules():
    """float32 operands convert nothing: their decomposition is differentiated as before (no sum_to work for
    same-shape operands, the same program)."""
    inputs = _inputs(torch.float32, (4, 6), (4, 6))
    results, jfn = _grads(lambda a, b: a * b + a, inputs, torch.randn(4, 6))
    _assert_same(results)
    assert _conversions(jfn) == []
