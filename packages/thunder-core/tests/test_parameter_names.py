"""Parameters named like the globals the generated prologue reads (``type``, ``computation``, ``MISS``, ``torch``,
a constant such as ``_tensor_guard0``): the jitted function behaves as eager does, whatever its parameters are
called (the prologue reads such a parameter under a local name, behind a forwarder with the user's signature)."""

from __future__ import annotations

import builtins
import copy
import inspect
import warnings

import pytest
import torch
from test_fusion_tiers import SlowFusion

import thunder
from thunder.tracing.prologue import _GLOBALS_READ

COLLIDING = ["type", "computation", "MISS", "Tensor", "torch", "len", "map", "_tensor_guard0", "_hits0", "_tensors"]


def _make(source: str, name: str):
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - a test function whose parameter names are the parametrization
    return namespace[name]


@pytest.mark.parametrize("name", COLLIDING)
def test_a_parameter_named_like_a_prologue_global_runs_as_eager(name):
    f = _make(f"def f(x, {name}):\n    return x * {name} + 1\n", "f")
    jf = thunder.jit(f)
    x, y = torch.randn(3, requires_grad=True), torch.randn(3)
    out = jf(x, y)
    torch.testing.assert_close(out, f(x, y))
    (grad,) = torch.autograd.grad(out.sum(), x)
    torch.testing.assert_close(grad, y)
    # by keyword, then again: a cache hit
    torch.testing.assert_close(jf(x=x, **{name: y}), f(x, y))
    hits, misses = thunder.cache_hits(jf), thunder.cache_misses(jf)
    torch.testing.assert_close(jf(x, y), f(x, y))
    assert (thunder.cache_hits(jf), thunder.cache_misses(jf)) == (hits + 1, misses)
    # a changed input (another dtype) is a miss and recompiles
    y64 = y.double()
    torch.testing.assert_close(jf(x.detach().double(), y64), f(x.detach().double(), y64))
    assert thunder.cache_misses(jf) == misses + 1


@pytest.mark.parametrize("name", COLLIDING)
def test_a_python_number_parameter_so_named_is_checked(name):
    f = _make(f"def f(x, {name}=2.0):\n    return x * {name}\n", "f")
    jf = thunder.jit(f)
    x = torch.randn(2)
    torch.testing.assert_close(jf(x), f(x))
    torch.testing.assert_close(jf(x, 3.0), f(x, 3.0))  # another value: not the first program's answer
    torch.testing.assert_close(jf(x, **{name: -1.5}), f(x, -1.5))
    torch.testing.assert_close(jf(x), x * 2.0)
    assert thunder.cache_misses(jf) == 3


def test_every_parameter_kind_with_colliding_names():
    def f(type, /, len, *map, computation, MISS=3.0, **torch):
        return type * len + sum(map) * computation + MISS + sum(torch.values())

    jf = thunder.jit(f)
    a, b, c, d, e = (torch.randn(2) for _ in range(5))
    cases = [
        ((a, b, c, d), {"computation": 2.0, "k": e}),
        ((a, b), {"computation": 2.0}),
        ((a,), {"len": b, "computation": -1.0, "MISS": 0.5}),
        ((a, b, c), {"computation": 2.0, "MISS": 1.0, "type": e}),  # "type" is positional-only: a **torch key
    ]
    for args, kwargs in cases:
        torch.testing.assert_close(jf(*args, **kwargs), f(*args, **kwargs))
    hits = thunder.cache_hits(jf)
    torch.testing.assert_close(jf(*cases[0][0], **cases[0][1]), f(*cases[0][0], **cases[0][1]))
    assert thunder.cache_hits(jf) == hits + 1
    with pytest.raises(TypeError, match="computation"):  # a missing argument: eager's TypeError
        jf(a, b)


def test_var_keyword_arguments_named_like_the_prologues_local_names():
    def f(type, **kwargs):
        return type + sum(kwargs.values())

    jf = thunder.jit(f)
    a, b = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(jf(a, _arg_type=b, _prologue_body=b), f(a, _arg_type=b, _prologue_body=b))


def test_a_default_changed_after_jit_is_seen_with_a_colliding_name():
    def f(x, type=1.0):
        return x * type

    jf = thunder.jit(f)
    x = torch.randn(2)
    torch.testing.assert_close(jf(x), x)
    f.__defaults__ = (5.0,)
    torch.testing.assert_close(jf(x), x * 5.0)


def test_the_jitted_function_keeps_the_users_signature():
    def f(x, type, *, MISS=1):
        return x * type + MISS

    assert inspect.signature(thunder.jit(f)) == inspect.signature(f)


def test_a_module_forward_with_colliding_parameter_names():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x, type=None, computation=1.0):
            y = self.lin(x) * computation
            return y if type is None else y + type

    m = M()
    reference = copy.deepcopy(m)
    jm = thunder.jit(m)
    x, t = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(jm(x), reference(x))
    torch.testing.assert_close(jm(x, t, computation=2.0), reference(x, t, computation=2.0))
    jm(x, type=t, computation=3.0).sum().backward()
    reference(x, type=t, computation=3.0).sum().backward()
    for (name, p), q in zip(m.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_the_fused_program_is_swapped_in_with_a_colliding_name():
    def f(a, computation):
        c = a * computation + 1
        return torch.tanh(c) * 2

    ex = SlowFusion()
    ex.release.set()
    jf = thunder.jit(f, executors=[ex, *thunder.get_default_executors()], fusion="wait")
    a, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(jf(a, b), f(a, b))
    assert thunder.wait_for_fusion(jf, timeout=60)
    calls = ex.fused_calls
    torch.testing.assert_close(jf(a, computation=b), f(a, b))
    assert ex.fused_calls > calls  # the fused program answered
    assert thunder.cache_misses(jf) == 1


def test_the_recompilation_warning_names_the_parameter_as_the_user_did():
    def f(x, type):
        return x * type

    jf = thunder.jit(f, recompile_limit=2)
    x = torch.randn(2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(4):
            torch.testing.assert_close(jf(x, float(i)), x * float(i))
    (message,) = [str(w.message) for w in caught if "recompile_limit" in str(w.message)]
    assert "change of type" in message and "_arg_" not in message


def test_non_colliding_parameters_keep_their_names_in_the_prologue():
    def f(a, input, *args, k=1, **kwargs):
        return a + input

    jf = thunder.jit(f)
    jf(torch.randn(2), torch.randn(2))
    assert "def prologue(a, input, *args, k=_default0, **kwargs):" in str(thunder.last_prologue_traces(jf)[-1])


def test_the_prologue_reads_no_builtin_outside_the_reserved_names():
    """The names a parameter is renamed for cover the builtins generated prologues call."""

    def f(x, *args, flag=True, scale=-0.0, nan=float("nan"), dev=torch.device("cpu"), **kwargs):
        return x * 2

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.register_forward_hook(lambda mod, args, out: None)

        def forward(self, x, pair):
            return self.lin(x) + pair[0] + pair[1]["t"] + torch.narrow(x, 1, 0, x.shape[1] // 2).sum()

    programs = []
    jf = thunder.jit(f)
    jf(torch.randn(2), torch.randn(2), 3, kw=torch.randn(2), size=torch.Size([2]), s="s")
    programs.append(jf)
    jm = thunder.jit(M(), dynamic=True)
    for n in (2, 4, 6):
        jm(torch.randn(n, 3), (torch.randn(3), {"t": torch.randn(n, 3)}))
    programs.append(jm)
    read = set()
    for program in programs:
        for trace in thunder.last_prologue_traces(program):
            read |= set(trace.python_callable().__code__.co_names)
    builtins_read = read & set(dir(builtins))
    assert "type" in builtins_read and "len" in builtins_read
    assert builtins_read <= _GLOBALS_READ, builtins_read - _GLOBALS_READ


@pytest.mark.parametrize("name", ["slice", "float", "torch", "Tensor", "saved_for_backward", "cotangents", "_obj0"])
def test_a_parameter_named_like_a_global_of_the_computation_or_backward(name):
    """The computation's variables are named after the parameters; none may shadow what its code reads."""
    f = _make(f"def f(x, {name}):\n    return (x * {name})[..., 1:].relu().float()\n", "f")
    x, y = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3)
    out = thunder.jit(f)(x, y)
    expected = f(x, y)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), x), torch.autograd.grad(expected.sum(), x))


# Operators an executor prints as calls of their own name (the torch executor runs these prims so: ``pad(...)``),
# each with a program whose forward or backward calls it; and names of torch functions, which print as
# ``torch.<name>`` (``torch`` itself is a global of every program). The set of such names is open-ended (every
# registered operator), so the generated code renames a variable that would shadow one.
_OPERATOR_NAME_PROGRAMS = {
    "pad": ("x[:, 1:] * {name}", (4, 3), True),  # backward of the slice: pad
    "sum": ("torch.var(x * {name}, 1)", (4, 4), True),
    "prod": ("torch.prod(x * {name}, 1)", (4, 4), True),
    "scatter_add": ("torch.gather(x * {name}, 1, torch.tensor([[0], [1], [2], [3]]))", (4, 4), True),
    "broadcast_in_dim": ("x * {name}", (4,), True),
    "add": ("torch.add(x, {name}) * {name}", (4, 4), False),
    "mul": ("x.mul({name}).sum(0)", (4, 4), False),
    "where": ("torch.where(x > 0, x, {name})", (4, 4), False),
    "torch": ("(x[:, 1:] * {name}[:, 1:]).sum(0)", (4, 4), False),  # (the user's code cannot call torch here)
}


def _called_names(jf) -> set[str]:
    """The names the last forward and backward programs call as globals (``name(...)``)."""
    import re

    source = str(thunder.last_traces(jf)[-1]) + str(thunder.last_backward_traces(jf)[-1])
    return set(re.findall(r"^\s+(?:[\w, ]+ = )?([A-Za-z_]\w*)\(", source, re.M))


@pytest.mark.parametrize("name", sorted(_OPERATOR_NAME_PROGRAMS))
def test_a_parameter_named_like_an_operator_the_program_calls(name):
    body, shape, printed_as_call = _OPERATOR_NAME_PROGRAMS[name]
    f = _make(f"import torch\ndef f(x, {name}):\n    return {body.format(name=name)}\n", "f")
    jf = thunder.jit(f)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 4, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(shape, generator=g, dtype=torch.float64, requires_grad=True)
    out, expected = jf(x, w), f(x, w)
    torch.testing.assert_close(out, expected)
    # gradients of both arguments: the backward reads the parameter (saved) beside the operator's call
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), (x, w)), torch.autograd.grad(expected.sum(), (x, w)), msg="gradients"
    )
    if printed_as_call:  # (the case this is about: the program calls a global of the parameter's name)
        assert name in _called_names(jf)
    # by keyword, and again: a cache hit
    torch.testing.assert_close(jf(x, **{name: w}), expected)
    hits = thunder.cache_hits(jf)
    torch.testing.assert_close(jf(x, w), expected)
    assert thunder.cache_hits(jf) == hits + 1


def test_a_local_variable_named_like_an_operator_the_backward_calls():
    def f(x, w):
        pad = x * w
        return pad[:, 1:] * 2, pad

    jf = thunder.jit(f)
    x, w = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    out, expected = jf(x, w), f(x, w)
    torch.testing.assert_close(out, expected)
    loss, e_loss = out[0].sum() + out[1].sum() * 3, expected[0].sum() + expected[1].sum() * 3
    torch.testing.assert_close(torch.autograd.grad(loss, (x, w)), torch.autograd.grad(e_loss, (x, w)))
    assert "pad" in _called_names(jf)


def test_a_parameter_named_like_an_executors_own_operator():
    from thunder.core.proxies import TensorProxy
    from thunder.extend import OperatorExecutor, deregister_executor, register_executor

    ex = OperatorExecutor("parameter_names_ex", version="0.1")
    register_executor(ex)
    try:

        def scaled_like(a, b):
            return a * b + 1

        scaled = ex.register_operator("scaled", like=scaled_like, fn=lambda a, b: a * b + 1)
        negated = ex.register_operator("negated", meta=lambda a: TensorProxy(like=a), fn=torch.neg)
        # the parameters are named like the operators, which the program calls as ``scaled(...)``
        program = _make(
            "def g(x, scaled, negated):\n    return op_scaled(x, scaled) + op_negated(negated)\n",
            "g",
        )
        program.__globals__.update(op_scaled=scaled, op_negated=negated)
        jg = thunder.jit(program, executors=[ex, *thunder.get_default_executors()])
        x, a, b = torch.randn(3), torch.randn(3), torch.randn(3)
        torch.testing.assert_close(jg(x, a, b), x * a + 1 - b)
        assert {"scaled", "negated"} <= _called_names_forward(jg)
        torch.testing.assert_close(jg(x, scaled=a, negated=b), x * a + 1 - b)
    finally:
        deregister_executor(ex)


def _called_names_forward(jf) -> set[str]:
    import re

    return set(re.findall(r"^\s+(?:[\w, ]+ = )?([A-Za-z_]\w*)\(", str(thunder.last_traces(jf)[-1]), re.M))
