"""One comparison of a function jitted against eager, shared by the campaign repro tests: values, dtypes,
``requires_grad``, view-ness, storage sharing with the inputs and among the outputs, the inputs after the call, and
gradients; and the error a function eager refuses raises when jitted."""

from __future__ import annotations

import os

import torch

import thunder

__all__ = ["assert_as_eager", "assert_raises_as_eager"]


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def assert_as_eager(fn, make_inputs, *, grads: bool = True) -> None:
    """Values, dtypes, ``requires_grad``, view-ness, storage sharing with the inputs and among the outputs, and
    gradients, against eager."""
    e_in, t_in = make_inputs(), make_inputs()
    expected = fn(*e_in)
    actual = thunder.jit(fn)(*t_in)
    expected = expected if isinstance(expected, tuple) else (expected,)
    actual = actual if isinstance(actual, tuple) else (actual,)
    assert len(expected) == len(actual)
    for k, (e, a) in enumerate(zip(expected, actual)):
        assert (a.dtype, a.shape, a.requires_grad, a._is_view()) == (e.dtype, e.shape, e.requires_grad, e._is_view())
        torch.testing.assert_close(a, e, equal_nan=True)
        for xe, xa in zip(e_in, t_in):
            assert shares_storage(a, xa) == shares_storage(e, xe)
        for e2, a2 in zip(expected[:k], actual[:k]):
            assert shares_storage(a, a2) == shares_storage(e, e2)
    for xe, xa in zip(e_in, t_in):
        torch.testing.assert_close(xa, xe, equal_nan=True)
    if not grads:
        return
    leaves_e = [x for x in e_in if x.requires_grad]
    leaves_a = [x for x in t_in if x.requires_grad]
    outs_e = [o for o in expected if o.requires_grad]
    outs_a = [o for o in actual if o.requires_grad]
    if not outs_e:
        return
    ge = torch.autograd.grad([_loss(o) for o in outs_e], leaves_e, allow_unused=True)
    ga = torch.autograd.grad([_loss(o) for o in outs_a], leaves_a, allow_unused=True)
    for x, y in zip(ge, ga):
        assert (x is None) == (y is None)
        if x is not None:
            torch.testing.assert_close(y, x, equal_nan=True)


def _loss(o: torch.Tensor) -> torch.Tensor:
    """A real scalar of ``o`` (of a complex one: its real and imaginary parts summed, each a cotangent of 1)."""
    return torch.view_as_real(o).sum() if o.is_complex() else o.sum()


def _first_line(error: BaseException) -> str:
    return str(error).splitlines()[0] if str(error) else ""


_OWN_FILE = "the file of fn"


def assert_raises_as_eager(fn, make_inputs, *, names_file: str | None = _OWN_FILE) -> BaseException:
    """Where eager raises on ``fn(*make_inputs())``, thunder.jit raises too: the same type, eager's first line of the
    message (thunder may name the op first), and the user's line named in the message or its notes (by its file:
    ``names_file``, by default ``fn``'s own; None: not checked). Returns thunder's error for further checks."""
    try:
        fn(*make_inputs())
    except Exception as e:  # noqa: BLE001 - whatever eager raises, thunder must raise alike
        expected = e
    else:
        raise AssertionError("eager ran: nothing to compare")
    try:
        thunder.jit(fn)(*make_inputs())
    except Exception as e:  # noqa: BLE001
        actual = e
    else:
        raise AssertionError(f"thunder ran where eager raised {type(expected).__name__}: {expected}")
    assert isinstance(actual, type(expected)), (actual, expected)
    assert _first_line(expected) in _first_line(actual), (actual, expected)
    if names_file == _OWN_FILE:
        names_file = os.path.basename(fn.__code__.co_filename)
    if names_file is not None:  # (in the message, or in a note: thunder.core.codegen.note_user_line)
        where = "\n".join([str(actual), *getattr(actual, "__notes__", ())])
        assert names_file in where, where
    return actual
