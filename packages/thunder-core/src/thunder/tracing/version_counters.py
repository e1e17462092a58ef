"""Eager's version counters: counted while tracing, given to the caller's tensors after each call.

Every in-place op bumps a tensor's version counter (``x._version``), which its views and ``detach()`` share
and ``x.data`` does not (it has a counter of its own): after ``x.data.mul_(2)`` eager leaves ``x._version``
as it was, after ``x.detach().mul_(2)``, ``x[0].add_(1)`` or ``x.t_()`` it is one more, after
``x.add_(1); x.mul_(2)`` two more. Autograd reads the counter (a tensor saved for backward and then updated
in place is an error), and so can user code.

A compiled program updates an argument differently: one write-back (``copy_``) at its end, maybe a layout
step, or nothing (``x.copy_(x)``). So the tracer counts eager's bumps per counter (the stand-ins of an
argument, of its views and of its ``detach()`` share one count; ``.data`` and every computed tensor start
their own), and the program's call sets each counted argument's version to what it was before the call
plus eager's count (``versions_after``). Arguments no update reached are not touched.

Two arguments that share a storage and eager's counter (views of one base, ``detach()``) share one count
(``share_argument_counters``), as the storage they are traced as views of does. A tensor requiring grad
that an update autograd records reached keeps the version the program's write-back gave it (at least one bump, as
eager), since autograd rebuilds a view's history from its base when its version changes.
"""

from __future__ import annotations

import torch

T = torch.Tensor
_DATA = frozenset((T.data.__get__,))  # (each T.data.__get__ is a new method wrapper: compared by equality)

__all__ = [
    "bump",
    "counts_of",
    "same_counter",
    "share_argument_counters",
    "share_counter",
    "versions_after",
    "versions_before",
]


def _counter(w) -> list[int]:
    c = w._tt_counter
    if c is None:
        c = [0]
        candidates, w._tt_counter_of = w._tt_counter_of, None
        if candidates:
            from thunder.tracing.views import view_of

            view = view_of(w)  # (a reshape or contiguous() may have copied: then a counter of its own)
            if view is not None:
                root = view[0]
                for a in candidates:
                    if a is root or (a._tt_view is not None and a._tt_view[0] is root):
                        c = _counter(a)
                        break
        w._tt_counter = c
    return c


def bump(w) -> None:
    """An in-place op updated the stand-in ``w`` (its values or its layout): one bump of its counter."""
    _counter(w)[0] += 1


def share_counter(func, out, args) -> None:
    """The result ``out`` of ``func(*args)`` shares the counter of the argument it views (views and
    ``detach()``), or has its own (``x.data``, a computed tensor). Decided when an update first reaches it,
    when whether it is a view is known."""
    from thunder.tracing.tracing_tensor import TracingTensor

    if func in _DATA:
        # a counter of its own; the tensor's own is counted from here on (an update through .data leaves it as is)
        if type(out) is TracingTensor and args and type(args[0]) is TracingTensor:
            out._tt_counter = [0]
            _counter(args[0])
        return

    candidates = None
    for o in out if isinstance(out, (tuple, list)) else (out,):
        if type(o) is not TracingTensor or o._tt_counter is not None or any(o is a for a in args):
            continue
        if o._tt_view is None and o._tt_pending is None:
            continue  # (a tensor of its own)
        if candidates is None:
            # (also those in a list: torch.atleast_2d((x,))[0] views x, and shares its counter)
            flat = [b for a in args for b in (a if type(a) in (tuple, list) else (a,))]
            candidates = tuple(a for a in flat if type(a) is TracingTensor)
        o._tt_counter_of = candidates


def same_counter(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the tensors ``a`` and ``b`` share eager's version counter (views of one base, ``detach()``; not
    ``.data``): asked by moving ``a``'s version and reading ``b``'s (then put back)."""
    try:
        va, vb = a._version, b._version
        torch._C._autograd._unsafe_set_version_counter((a,), (va + 1,))
        try:
            return b._version != vb
        finally:
            torch._C._autograd._unsafe_set_version_counter((a,), (va,))
    except RuntimeError:  # (an inference tensor: no counter)
        return False


def share_argument_counters(root, members: list[tuple]) -> list[bool]:
    """The stand-ins of arguments sharing one storage (``members``: (stand-in, the caller's tensor)) and of that
    storage (``root``, a view of the first argument) share one count where eager's tensors share one counter
    (``a1 = a0[..., :1]``: an update of ``a0`` bumps ``a1``'s version, and a value saved from ``a1`` before it is
    then stale for eager's backward). Returns, for each member after the first, whether it shares the first's
    counter (the prologue checks it: the program's counts hold for those calls only)."""
    first = members[0][1]
    shared = _counter(members[0][0])
    root._tt_counter = shared
    answers = []
    for w, t in members[1:]:
        answers.append(same_counter(first, t))
        # (one of its own otherwise: as a view of the storage it would read the storage's)
        w._tt_counter = shared if answers[-1] else [0]
    return answers


def counts_of(wrappers) -> list[int | None]:
    """Eager's number of bumps of each stand-in's counter while tracing; None where the tracer did not count
    (no in-place op and no ``.data`` reached it: a module buffer a functional op updates, as batch norm's
    statistics, keeps the bump of its write-back)."""
    return [None if w._tt_counter is None else w._tt_counter[0] for w in wrappers]


def versions_before(tensors: tuple, bumps: tuple = (), early: tuple = ()) -> tuple:
    """The callers' tensors' versions before the call (None for an inference tensor, which has no counter). Those
    marked ``early`` (requiring grad, reached by eager's in-place ops but neither written back nor restrided by the
    program) get their ``bumps`` now: the program's autograd node then saves them at eager's version."""
    out = []
    for t in tensors:
        try:
            out.append(t._version)
        except RuntimeError:
            out.append(None)
    now = [(t, b + n) for t, b, n, e in zip(tensors, out, bumps, early) if e and b is not None and n]
    if now:
        torch._C._autograd._unsafe_set_version_counter(tuple(t for t, _ in now), tuple(v for _, v in now))
    return tuple(out)


def versions_after(before: tuple, result, tensors: tuple, bumps: tuple):
    """Sets each of the caller's ``tensors`` to its version ``before`` the call plus eager's ``bumps``; returns
    the call's ``result``."""
    keep = [
        (t, b + n)
        for t, b, n in zip(tensors, before, bumps)
        # (a tensor requiring grad that an update autograd records reached: the program gave it, and the views of it
        # the program returns, their history at the version it has now, at least one bump as in eager; another
        # version would make autograd rebuild or refuse that history)
        if b is not None and not t.is_inference() and not (n and t.requires_grad)
    ]
    if keep:
        torch._C._autograd._unsafe_set_version_counter(tuple(t for t, _ in keep), tuple(v for _, v in keep))
    return result
