"""An in-place op whose other operand broadcasts the updated tensor to a larger shape: eager raises (the result
would not fit), thunder.jit raised nothing and returned the larger result."""

from __future__ import annotations

import pytest
import torch

import thunder

_UPDATES = {
    "add_": lambda x, y: x.add_(y),
    "mul_": lambda x, y: x.mul_(y),
    "sub_": lambda x, y: x.sub_(y, alpha=2),
    "iadd": lambda x, y: x.__iadd__(y),
    "masked_fill_": lambda x, y: x.masked_fill_(y > 0, 1.0),
    "clamp_": lambda x, y: x.clamp_(min=y),
    "lerp_": lambda x, y: x.lerp_(y, 0.5),
    "copy_": lambda x, y: x.copy_(y),
}


def _eager_error(fn, *args):
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    return info.value


@pytest.mark.parametrize("name", sorted(_UPDATES))
@pytest.mark.parametrize("x_shape, y_shape", [((3,), (2, 3)), ((), (4,)), ((2, 1), (2, 3))])
def test_update_broadcast_to_a_larger_shape_raises_as_in_eager(name, x_shape, y_shape):
    update = _UPDATES[name]

    def f(x, y):
        update(x, y)
        return x * 2

    x, y = torch.zeros(x_shape), torch.ones(y_shape)
    expected = _eager_error(f, x.clone(), y)
    with pytest.raises(RuntimeError) as info:
        thunder.jit(f)(x, y)
    message = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
    assert type(info.value) is type(expected)
    assert "test_inplace_broadcast_shape.py" in message  # names the user's line
    torch.testing.assert_close(x, torch.zeros(x_shape))  # the caller's tensor is not written


@pytest.mark.parametrize("name", sorted(_UPDATES))
def test_update_broadcasting_the_other_operand_still_works(name):
    update = _UPDATES[name]

    def f(x, y):
        update(x, y)
        return x * 2

    x, y = torch.linspace(-1, 1, 6).reshape(2, 3), torch.linspace(0.5, -0.5, 3)
    xe, xt = x.clone(), x.clone()
    torch.testing.assert_close(thunder.jit(f)(xt, y), f(xe, y))
    torch.testing.assert_close(xt, xe)


def test_a_0d_view_updated_with_a_vector_raises():
    def f(b, t):
        b[0].add_(t)
        return b

    b, t = torch.zeros(3), torch.ones(4)
    _eager_error(f, b.clone(), t)
    with pytest.raises(RuntimeError, match=r"output with shape \[\] doesn't match the broadcast shape \[4\]"):
        thunder.jit(f)(b, t)
