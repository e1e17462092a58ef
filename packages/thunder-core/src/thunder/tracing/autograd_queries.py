"""``x.is_leaf``, ``x.grad_fn``, ``x._base`` and ``x._is_view()`` read inside the traced function.

Eager answers them from the autograd graph, which a stand-in does not have. The answers given here are eager's
for the tensor the stand-in stands for:

- a tensor computed inside the function is a leaf exactly when it does not require grad (an operation on a
  tensor that requires grad records a ``grad_fn``); a ``grad_fn`` that exists reads as :data:`RUNTIME_GRAD_FN`,
  a placeholder that is not None (the real one exists only when the program runs);
- an argument answers as the caller's tensor did, and the prologue checks that answer on every call (a leaf
  requiring grad and a non-leaf requiring grad get separate programs, as do a view and a tensor owning its
  storage);
- ``_base`` is the stand-in of the tensor a view was taken from (eager's base is always the first tensor of a
  chain of views; ``detach()`` starts a new chain). Where that tensor is outside the function (an argument
  that is a view of a tensor the caller did not pass), it reads as :data:`OUTSIDE_BASE`, a placeholder that is
  not None; where thunder cannot tell (a view of arguments that share their storage), reading it raises a
  clear error.
"""

from __future__ import annotations

import torch

from thunder.tracing.errors import TracingError, describe_location, user_frame
from thunder.tracing.tracing_tensor import TracingTensor
from thunder.tracing.views import view_of

T = torch.Tensor

__all__ = [
    "AUTOGRAD_QUERIES",
    "AUTOGRAD_UPDATES",
    "OUTSIDE_BASE",
    "RUNTIME_GRAD_FN",
    "answer",
    "detach_in_place",
    "refuse_unsupported_update",
    "requires_grad_in_place",
]

# (a getter is a new method-wrapper object at each attribute read: compared by ==, not identity)
_IS_LEAF, _GRAD_FN, _BASE = T.is_leaf.__get__, T.grad_fn.__get__, T._base.__get__
AUTOGRAD_QUERIES = frozenset({_IS_LEAF, _GRAD_FN, _BASE, T._is_view})
_SET_DATA = T.data.__set__
# calls that change a tensor's autograd state rather than its values (see refuse_unsupported_update)
AUTOGRAD_UPDATES = frozenset({T.requires_grad_, T.detach_, _SET_DATA})


class _Placeholder:
    """An answer that is not None but holds nothing to read: reading from it raises ``refusal`` (naming what)."""

    def __init__(self, description: str, refusal: str) -> None:
        self._description, self._refusal = description, refusal

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise TracingError(self._refusal.format(name=name))

    def __repr__(self) -> str:
        return f"<{self._description}>"


# what x.grad_fn reads inside the traced function when x has one: it exists when the program runs
RUNTIME_GRAD_FN = _Placeholder(
    "grad_fn of a thunder program's output",
    "thunder.jit cannot read grad_fn.{name} inside the jitted function: the autograd graph exists only when the "
    "program runs (read it on the outputs after the call; `x.grad_fn is None` works inside)",
)
# what x._base reads when x is (a view of) an argument that is a view of a tensor outside the function
OUTSIDE_BASE = _Placeholder(
    "the base of an argument, outside the jitted function",
    "thunder.jit cannot read ._base.{name} inside the jitted function: that base is a tensor the function was not "
    "given (pass it as an argument; `x._base is None` works inside)",
)


def _input_of(tracer, w: TracingTensor) -> tuple[torch.Tensor, str] | tuple[None, None]:
    """The caller's tensor a stand-in was made for and where the prologue reads it, or (None, None)."""
    inputs = getattr(tracer, "inputs", None)
    for ti in inputs.tensors if inputs is not None else ():
        if ti.wrapper is w:
            example = ti.example if ti.example is not None else ti.original
            expr = inputs.first_read.get(id(example)) if example is not None else None
            if expr is not None:
                return example, expr
    return None, None


def _requires_grad(w: TracingTensor) -> bool:
    p = w._thunder_proxy
    return bool(p.requires_grad) and p.dtype.kind in ("float", "complex")


def _is_leaf(tracer, w: TracingTensor) -> bool:
    example, expr = _input_of(tracer, w)
    if example is None:  # (a view made without grad of a tensor requiring grad: a leaf requiring grad, as in eager)
        return not _requires_grad(w) or w._tt_leaf_view or w._tt_made_leaf is not None
    if _requires_grad(w) and not example.requires_grad:
        return False  # an in-place update with a value that requires grad gave it a grad_fn
    if example.requires_grad:  # (a tensor that does not require grad is a leaf: the tensor check covers it)
        tracer.inputs.prologue.fail_unless(
            f"getattr({expr}, 'is_leaf', None) is {example.is_leaf}", f"whether {expr} is a leaf"
        )
    return example.is_leaf


def _base(tracer, w: TracingTensor):
    example, expr = _input_of(tracer, w)
    if example is not None:  # an argument: a view of a tensor outside the function, or no view
        return _argument_base(tracer, example, expr, None)
    if w._tt_nondiff:  # eager: detach() starts a new family; its views have the detach() output as base
        family = getattr(w, "_tt_family", None)
        if family is None:
            _refuse("of a view taken through detach() or .data")
        return None if family is w else family
    view = view_of(w)
    if view is None:
        return None
    root = view[0]
    example, expr = _input_of(tracer, root)
    if example is not None:
        return _argument_base(tracer, example, expr, root)
    if root._tt_owner is None:  # the storage several arguments share: its own base is not the answer
        _refuse("of a view of an argument that shares its storage with another argument")
    return root


def _argument_base(tracer, example: torch.Tensor, expr: str, itself):
    """The base of a view of the argument ``example`` (``itself``: its stand-in; None: of the argument itself)."""
    if example._base is None:
        tracer.inputs.prologue.fail_unless(f"getattr({expr}, '_base', 0) is None", f"whether {expr} is a view")
        return itself
    tracer.inputs.prologue.fail_unless(f"getattr({expr}, '_base', None) is not None", f"whether {expr} is a view")
    return OUTSIDE_BASE


def _refuse(where: str) -> None:
    raise TracingError(f"thunder.jit cannot tell which tensor x._base is {where}\n  {describe_location(user_frame(4))}")


def answer(tracer, func, w):
    """Eager's answer to ``func`` (one of :data:`AUTOGRAD_QUERIES`) for the tensor ``w`` stands for."""
    if func == _IS_LEAF:
        return _is_leaf(tracer, w)
    if func == _GRAD_FN:
        return None if _is_leaf(tracer, w) else RUNTIME_GRAD_FN
    base = _base(tracer, w)
    return base if func == _BASE else base is not None


def refuse_unsupported_update(tracer, func, args, kwargs) -> None:
    """Raises for what would change the caller's tensor other than its values, which a program cannot do.

    ``x.data = y`` (x then holds y's storage, dtype and sizes); and on an argument, ``x.requires_grad_()``
    changing the flag, or ``x.detach_()`` (the caller's tensor would lose or gain its autograd history).
    """
    w = args[0]
    if not isinstance(w, TracingTensor):
        return
    if func == _SET_DATA:
        why = "assign x.data (x would take another tensor's storage, dtype and sizes)"
        hint = "use `with torch.no_grad(): x.copy_(y)` to write y's values into x"
    elif _input_of(tracer, w)[0] is None:
        return
    elif func is T.detach_:
        why = "detach_() an argument (the caller's tensor would lose its autograd history)"
        hint = "use `x = x.detach()` inside the function, or detach it before the call"
    else:
        flag = kwargs.get("requires_grad", args[1] if len(args) > 1 else True)
        if bool(flag) == _requires_grad(w):
            return
        why = f"change requires_grad of an argument (x.requires_grad_({bool(flag)}) changes the caller's tensor)"
        hint = "call it before the jitted function"
    raise TracingError(f"thunder.jit cannot {why}: {hint}\n  {describe_location(user_frame(3))}")


def detach_in_place(tracer, w: TracingTensor) -> TracingTensor:
    """``w.detach_()`` of a tensor computed inside the function: from here on it holds its detached value."""
    if view_of(w) is not None and not w._tt_nondiff:
        raise RuntimeError(
            "Can't detach views in-place. Use detach() instead (as in eager)\n  " + describe_location(user_frame(3))
        )
    detached = tracer.handle(T.detach, (w,), {})
    w._thunder_proxy = detached._thunder_proxy
    with torch._C.DisableTorchFunction():
        w.requires_grad_(False)
    return w


_NOT_A_LEAF = (
    "you can only change requires_grad flags of leaf variables. If you want to use a computed variable in a "
    "subgraph that doesn't require differentiation use var_no_grad = var.detach() (as in eager)"
)


def requires_grad_in_place(tracer, w, flag) -> object:
    """``w.requires_grad_(flag)`` of a tensor computed inside the function (an argument's flag cannot change: see
    :func:`refuse_unsupported_update`), as eager: a tensor that did not require grad becomes a leaf requiring grad
    (what is computed from it afterwards requires grad); a leaf requiring grad stops requiring it; a non-leaf
    requiring grad raises. The gradient eager accumulates into such a leaf is not computed: returning it, or
    making a view of an argument a leaf, is refused naming the user's line (see :func:`refuse_returned_made_leaf`).
    """
    if not isinstance(w, TracingTensor) or _input_of(tracer, w)[0] is not None:
        return w
    flag = bool(flag)
    if flag == _requires_grad(w):
        return w
    if flag:
        if w._thunder_proxy.dtype.kind not in ("float", "complex"):
            raise RuntimeError(
                "only Tensors of floating point and complex dtype can require gradients (as in eager)\n  "
                + describe_location(user_frame(3))
            )
        if view_of(w) is not None:
            raise TracingError(
                "thunder.jit cannot make a view require grad inside the jitted function (v.requires_grad_() of a "
                "view that does not require grad: eager makes it a leaf of its own, which thunder does not "
                "model): call .clone() first, or make the tensor it views require grad\n  "
                + describe_location(user_frame(3))
            )
        from thunder.core.trace import get_tracectx
        from thunder.tracing.autograd_function import made_leaf_requiring_grad
        from thunder.tracing.inplace_grad import record_on_torch_executor

        w._thunder_proxy = record_on_torch_executor(made_leaf_requiring_grad, get_tracectx(), (w._thunder_proxy,))
        w._tt_made_leaf = describe_location(user_frame(3))
        w._tt_grad_leaf = True  # (eager refuses to update it in place with grad enabled)
    else:
        if w._tt_made_leaf is None:
            raise RuntimeError(_NOT_A_LEAF + "\n  " + describe_location(user_frame(3)))
        from thunder.tracing.inplace_grad import _detached

        w._thunder_proxy = _detached(w._thunder_proxy)
        w._tt_made_leaf = None
        w._tt_grad_leaf = False
    with torch._C.DisableTorchFunction():
        w.requires_grad_(flag)
    return w


def refuse_returned_made_leaf(leaf) -> None:
    """Raises for an output that ``requires_grad_()`` made a leaf inside the function: eager's output is that
    leaf, into which the gradients of the other outputs flow (``torch.autograd.grad(out, leaf)``, ``leaf.grad``);
    thunder does not compute them, and refuses rather than return a leaf no gradient reaches."""
    where = getattr(leaf, "_tt_made_leaf", None)
    if where is None or not leaf._thunder_proxy.requires_grad:
        return
    raise TracingError(
        "thunder.jit cannot return a tensor made a leaf requiring grad inside the jitted function (eager gives "
        "it the gradient of what was computed from it, which thunder does not compute): call requires_grad_() "
        "on it outside the function, or return a computed copy (.clone())\n  " + where
    )
