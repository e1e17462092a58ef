"""Printed traces: valid Python named after the user's program; outputs keep eager's structure."""

from __future__ import annotations

import pytest
import torch

import thunder


def _final(fn) -> str:
    return str(thunder.last_traces(fn)[-1])


def _add_mul(a, b):
    c = a + b
    d = c * a
    return d


def test_every_trace_compiles():
    jfn = thunder.jit(_add_mul)
    jfn(torch.randn(3), torch.randn(3))
    traces = thunder.last_traces(jfn)
    assert len(traces) >= 2
    for trace in traces:
        compile(str(trace), "<trace>", "exec")


def test_final_trace_runs_standalone_like_eager():
    """The printed final trace, executed on its own, computes what eager PyTorch does."""
    jfn = thunder.jit(_add_mul)
    a, b = torch.randn(3), torch.randn(3)
    jfn(a, b)
    namespace: dict = {}
    exec(compile(_final(jfn), "<trace>", "exec"), namespace)
    torch.testing.assert_close(namespace["computation"](a, b), _add_mul(a, b), rtol=0, atol=0)


def test_inputs_are_named_after_parameters():
    def fn(weight, bias, scale):
        return weight * scale + bias

    jfn = thunder.jit(fn)
    jfn(torch.randn(4), torch.randn(4), torch.randn(4))
    assert "def computation(weight, bias, scale):" in _final(jfn)


def test_locals_keep_user_names():
    jfn = thunder.jit(_add_mul)
    jfn(torch.randn(3), torch.randn(3))
    src = _final(jfn)
    assert "c = torch.add(a, b)" in src
    assert "d = torch.mul(c, a)" in src
    assert "return d" in src


def test_del_after_last_use():
    jfn = thunder.jit(_add_mul)
    jfn(torch.randn(3), torch.randn(3))
    lines = [line.strip() for line in _final(jfn).splitlines()]
    add = lines.index(next(line for line in lines if line.startswith("c = torch.add(a, b)")))
    # (the mul writes into c, which nothing reads afterwards: executors/buffer_reuse.py)
    mul = lines.index(next(line for line in lines if line.startswith("d = Tensor.mul_(c, a)")))
    deleted_at = {}
    for n, line in enumerate(lines):
        if line.startswith("del "):
            for name in line[4:].split(","):
                deleted_at[name.strip()] = n
    # b is last used by the add, c and a by the mul; the output d is never deleted
    assert add < deleted_at["b"] < mul
    assert deleted_at["c"] > mul and deleted_at["a"] > mul
    assert "d" not in deleted_at


def test_type_comments_describe_inputs():
    jfn = thunder.jit(lambda x, y: x + y)
    jfn(torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64))
    src = _final(jfn)
    assert '# x: "cpu f64[2, 3]"' in src
    assert '# y: "cpu f64[2, 3]"' in src


def test_returns_tuple_like_eager():
    def fn(a, b):
        return a + b, a - b

    a, b = torch.randn(3), torch.randn(3)
    out = thunder.jit(fn)(a, b)
    expected = fn(a, b)
    assert type(out) is tuple and len(out) == 2
    for o, e in zip(out, expected):
        torch.testing.assert_close(o, e)


def test_returns_dict_like_eager():
    def fn(a, b):
        return {"sum": a + b, "prod": a * b}

    a, b = torch.randn(3), torch.randn(3)
    out = thunder.jit(fn)(a, b)
    expected = fn(a, b)
    assert type(out) is dict and list(out) == list(expected)
    for k in expected:
        torch.testing.assert_close(out[k], expected[k])


def test_returns_nested_structure_with_non_tensors():
    def fn(a, b):
        return a + 1, {"x": a * b, "y": None, "n": 3}, [b]

    a, b = torch.randn(2), torch.randn(2)
    out = thunder.jit(fn)(a, b)
    expected = fn(a, b)
    assert type(out) is tuple and type(out[1]) is dict and type(out[2]) is list
    torch.testing.assert_close(out[0], expected[0])
    torch.testing.assert_close(out[1]["x"], expected[1]["x"])
    assert out[1]["y"] is None and out[1]["n"] == 3
    torch.testing.assert_close(out[2][0], expected[2][0])


def test_returns_none():
    def fn(a):
        a + 1
        return None

    assert thunder.jit(fn)(torch.ones(2)) is None


def test_returns_python_number():
    def fn(a):
        return a.shape[0] * 2 + a.ndim

    jfn = thunder.jit(fn)
    out = jfn(torch.ones(3, 5))
    assert out == fn(torch.ones(3, 5)) == 8
    assert type(out) is int


def test_returns_python_float():
    def fn(a, s):
        return s * 0.5

    out = thunder.jit(fn)(torch.ones(1), 3.0)
    assert out == 1.5 and type(out) is float


def test_nested_tuple_list_dict_inputs():
    def fn(inp):
        (p, q), rest = inp["pair"], inp["rest"]
        return p * q + rest[0] - rest[1]

    inp = {"pair": (torch.randn(3), torch.randn(3)), "rest": [torch.randn(3), torch.randn(3)]}
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(inp), fn(inp))
    src = _final(jfn)
    compile(src, "<trace>", "exec")
    # every tensor leaf is an input of the computation
    header = next(line for line in src.splitlines() if line.startswith("def computation("))
    assert header.count(",") == 3


def test_keyword_arguments():
    def fn(a, *, scale=2.0, shift):
        return a * scale + shift

    a, shift = torch.randn(3), torch.randn(3)
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(a, shift=shift), fn(a, shift=shift))
    torch.testing.assert_close(jfn(a, scale=3.0, shift=shift), fn(a, scale=3.0, shift=shift))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bool])
def test_dtypes_round_trip(dtype):
    def fn(a, b):
        return a == b, torch.where(a == b, a, b)

    a = torch.tensor([1, 0, 1]).to(dtype)
    b = torch.tensor([1, 1, 0]).to(dtype)
    out = thunder.jit(fn)(a, b)
    expected = fn(a, b)
    for o, e in zip(out, expected):
        assert o.dtype == e.dtype
        torch.testing.assert_close(o, e)


def test_in_place_update_of_input_like_eager():
    def fn(a):
        a.add_(1)
        return a * 2

    a, a_ref = torch.ones(3), torch.ones(3)
    out = thunder.jit(fn)(a)
    expected = fn(a_ref)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(a, a_ref)  # the caller's tensor was updated as in eager


def test_returning_an_input_returns_the_same_object():
    def fn(a, b):
        return a, a + b

    a, b = torch.ones(2), torch.ones(2)
    out = thunder.jit(fn)(a, b)
    assert out[0] is a


_GLOBAL_WEIGHT = torch.full((2,), 3.0)


def test_captured_global_tensor_like_eager():
    def fn(a):
        return a * _GLOBAL_WEIGHT

    a = torch.randn(2)
    jfn = thunder.jit(fn)
    torch.testing.assert_close(jfn(a), fn(a))
    compile(_final(jfn), "<trace>", "exec")


def test_captured_closure_tensor_like_eager():
    captured = torch.full((2,), 5.0)

    def fn(a):
        return a + captured

    a = torch.randn(2)
    torch.testing.assert_close(thunder.jit(fn)(a), fn(a))


def test_proxy_to_accepts_thunder_dtypes():
    # executors' transforms work on proxies, whose dtype is a thunder dtype
    from thunder.core import dtypes
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import TraceCtx, tracectx

    with tracectx(TraceCtx()):
        p = TensorProxy(shape=(2,), dtype=torch.float32, device="cpu")
        assert p.to(dtypes.bfloat16).dtype is dtypes.bfloat16
        assert p.to(p.dtype) is p
