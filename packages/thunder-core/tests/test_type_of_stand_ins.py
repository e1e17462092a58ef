"""``type(x)`` inside thunder.jit answers as in eager (thunder/tracing/type_shadow.py), and code outside the traced
function keeps the builtin ``type``."""

from __future__ import annotations

import builtins
import textwrap

import pytest
import torch

import thunder


class Doubled(torch.Tensor):
    """A tensor subclass input (it keeps its class through operations, as eager's subclasses do)."""


def _branches_on_type(x, w):
    plain = x + 1 if type(x) is torch.Tensor else x - 1
    param = w * 3 if type(w) is torch.nn.Parameter else w * 5
    sub = x * 7 if type(x) is Doubled else x * 11
    return plain, param, sub, (type(x).__name__, type(w).__name__, type(x) == torch.Tensor)  # noqa: E721 (what user code writes)


def test_type_of_a_tensor_a_parameter_and_a_subclass_is_their_class():
    x = torch.randn(3)
    w = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    s = torch.randn(3).as_subclass(Doubled)
    jf = thunder.jit(_branches_on_type)
    for a, b in ((x, w), (x, x), (w, x), (s, w)):  # each pair its own program: the class is part of the input check
        actual, expected = jf(a, b), _branches_on_type(a, b)
        torch.testing.assert_close(actual[:3], expected[:3], check_dtype=True)
        assert actual[3] == expected[3]
    assert thunder.cache_misses(jf) == 4 and thunder.cache_hits(jf) == 0
    torch.testing.assert_close(jf(x, w)[:3], _branches_on_type(x, w)[:3])  # (x, w) again: served by its program
    torch.testing.assert_close(jf(w, x)[:3], _branches_on_type(w, x)[:3])
    assert thunder.cache_misses(jf) == 4 and thunder.cache_hits(jf) == 2


def _scale_of(t):
    return 2.0 if type(t) is torch.nn.Parameter else 3.0


class _Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(3))
        self.register_buffer("offset", torch.randn(3))

    def forward(self, x):
        # a helper in this module (followed through the globals) and the forward itself read type()
        kind = type(self.offset).__name__
        return x * self.weight * _scale_of(self.weight) + self.offset * _scale_of(self.offset), kind


def test_type_in_a_modules_forward_and_the_helpers_it_calls():
    m, x = _Scaled(), torch.randn(3)
    (actual, kind), (expected, expected_kind) = thunder.jit(m)(x), m(x)
    torch.testing.assert_close(actual, expected)
    assert kind == expected_kind == "Tensor"


def _type_as_the_builtin(x):
    class Meta(type):
        def describe(cls):
            return f"made by Meta: {cls.__name__}"

    class WithMeta(metaclass=Meta):
        pass

    Made = type("Made", (object,), {"k": 3})
    answers = (
        int is int,
        type(int) is type,
        type(type) is type,
        type(WithMeta) is Meta,
        WithMeta.describe(),
        isinstance(int, type),
        isinstance(Meta, type),
        isinstance(x, type),
        issubclass(Meta, type),
        Made.k,
        type(Made()).__name__,
        {type: "type's entry"}.get(type(int)),
        type.__name__,
    )
    return x * 2, answers


def test_type_behaves_as_the_builtin_for_everything_else_while_tracing():
    x = torch.randn(2)
    actual, expected = thunder.jit(_type_as_the_builtin)(x), _type_as_the_builtin(x)
    torch.testing.assert_close(actual[0], expected[0])
    assert actual[1] == expected[1]


def _fails_after_reading_type(x):
    if type(x) is torch.Tensor:
        raise ValueError("the traced function raised")
    return x


def test_code_outside_the_traced_function_keeps_the_builtin_type():
    x = torch.randn(2)
    seen_during_tracing = []

    def f(y):
        seen_during_tracing.append(type(y) is torch.Tensor)
        return y * 2

    thunder.jit(f)(x)
    assert seen_during_tracing == [True]
    # after tracing, this module's globals hold no ``type`` of ours, also after an error while tracing
    assert "type" not in globals() and type is builtins.type
    with pytest.raises(ValueError, match="the traced function raised"):
        thunder.jit(_fails_after_reading_type)(x)
    assert "type" not in globals() and type(x) is torch.Tensor


def test_a_module_with_its_own_global_named_type_keeps_it():
    namespace = {"torch": torch, "type": lambda obj: "the module's own"}
    exec(
        textwrap.dedent(
            """
            def f(x):
                return x * 2 if type(x) == "the module's own" else x * 3
            """
        ),
        namespace,
    )
    f = namespace["f"]
    x = torch.randn(2)
    torch.testing.assert_close(thunder.jit(f)(x), x * 2)
    assert namespace["type"](x) == "the module's own"
