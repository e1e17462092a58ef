"""Reverse-mode autodiff over traces.

Gradients are defined by *grad transforms*: functions with an operation's signature that call
forward operations, ask for the incoming cotangent of an output with ``get_grad`` and give the
inputs' gradients with ``put_grad``/``put_grads``. Thunder records a grad transform once and splits
what it recorded: operations that depend on a cotangent go to the backward, the rest stay in the
forward.

Which grad transform differentiates a bound symbol, first match wins:
1. an executor's ``register_implementation(..., grad_transform=f)`` whose checker accepts it;
2. a rule registered for the symbol with :func:`register_grad` (every differentiable prim has one);
   a rule may decline a call by returning ``NotImplemented`` (the next way then applies);
3. its decomposition: the forward keeps the single operation, the backward recomputes the
   decomposition's intermediates from the operation's inputs and differentiates them; a
   decomposition that draws random numbers runs in the forward instead, so the backward uses the
   numbers the forward drew.

``detach`` (``.data``, and the end of a ``no_grad``/``inference_mode`` region, where the tracer
records one) is a stop-gradient: nothing flows through it. Values no gradient reaches are left out
of the backward, and outputs among them do not require grad.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from thunder.core import devices, dtypes
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol, flat_proxies
from thunder.core.trace import TraceCtx, from_trace, tracectx
from thunder.transforms.complex_grads import complex_grad_rule

__all__ = ["get_grad", "put_grad", "put_grads", "needs_grad", "register_grad", "Joint", "build_joint"]

_grad_rules: dict[str, Callable] = {}


def register_grad(sym: Symbol | str, rule: Callable | None = None):
    """Registers ``rule`` (a grad transform with ``sym``'s signature) as the gradient of ``sym``."""
    key = sym if isinstance(sym, str) else sym.id

    def decorator(fn):
        _grad_rules[key] = fn
        return fn

    return decorator(rule) if rule is not None else decorator


def grad_rule_for(sym: Symbol) -> Callable | None:
    return _grad_rules.get(sym.id)


# ---------------------------------------------------------------- get_grad / put_grad


class _GradRecording:
    """What one grad transform asked for (cotangents) and gave (gradient contributions)."""

    __slots__ = ("cotangents", "contributions")

    def __init__(self):
        self.cotangents: dict[str, TensorProxy] = {}
        self.contributions: list[tuple[TensorProxy, TensorProxy]] = []


_recording: list[_GradRecording] = []
_differentiating = None  # the _Differentiator at work


def get_grad(x: TensorProxy) -> TensorProxy:
    """The cotangent (incoming gradient) of the forward value ``x``, inside a grad transform."""
    if not _recording:
        raise RuntimeError("get_grad can only be called inside a grad transform while thunder differentiates a program")
    rec = _recording[-1]
    c = rec.cotangents.get(x.name)
    if c is None:
        c = TensorProxy(like=x, requires_grad=False, prefix="g")
        rec.cotangents[x.name] = c
    return c


def needs_grad(x) -> bool:
    """Whether a gradient can reach the forward value ``x`` (it depends on an input that requires grad),
    inside a grad transform."""
    return _differentiating is not None and isinstance(x, Proxy) and x.name in _differentiating.requires_grad


def put_grad(x, grad) -> None:
    """Gives ``grad`` as (a contribution to) the gradient of the forward value ``x``, inside a grad transform."""
    if not _recording:
        raise RuntimeError("put_grad can only be called inside a grad transform while thunder differentiates a program")
    if isinstance(x, TensorProxy) and isinstance(grad, TensorProxy):
        _recording[-1].contributions.append((x, grad))


def put_grads(xs: Sequence, grads: Sequence) -> None:
    """``put_grad`` for each pair of ``xs`` and ``grads`` (``None`` gradients and non-tensors are skipped)."""
    for x, g in zip(xs, grads):
        if g is not None:
            put_grad(x, g)


# ---------------------------------------------------------------- recording the joint program


@dataclass
class _Group:
    """The backward of one grad transform call, or (``recompute``/``children``) of a decomposed operation."""

    outputs: dict[str, TensorProxy]  # forward outputs whose cotangents it consumes, by name
    backward: list[BoundSymbol] = field(default_factory=list)
    cotangents: dict[str, TensorProxy] = field(default_factory=dict)
    contributions: list = field(default_factory=list)
    recompute: list[BoundSymbol] = field(default_factory=list)
    children: list = field(default_factory=list)


@dataclass
class Joint:
    """A differentiated program: its forward bound symbols and the groups its backward is built from."""

    forward: list[BoundSymbol]
    groups: list[_Group]
    requires_grad: set[str] = field(default_factory=set)  # every value a gradient can reach, inputs included


# symbols whose outputs carry no gradient (their inputs get none through them)
_STOP_GRADIENT = frozenset({"torch.detach"})


def _draws_random(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` or its decomposition draws random numbers."""
    if "random" in bsym.sym.tags:
        return True
    return any(_draws_random(s) for s in bsym.subsymbols)


def _is_differentiable(p) -> bool:
    return (
        isinstance(p, TensorProxy)
        and dtypes.is_inexact_dtype(p.dtype)
        and not getattr(p, "nondifferentiable", False)  # an opaque op's output eager's autograd does not track
    )


class _Differentiator:
    def __init__(self, trace: TraceCtx, executors):
        self.trace = trace
        self.executors = executors
        self.requires_grad: set[str] = set()

    def run(self, bsyms: Sequence[BoundSymbol]) -> tuple[list[BoundSymbol], list[_Group]]:
        forward: list[BoundSymbol] = []
        groups: list[_Group] = []
        for bsym in bsyms:
            self.process(bsym, forward, groups)
        return forward, groups

    def _grad_transform(self, bsym: BoundSymbol):
        for ex in self.executors:
            impl = ex.implmap.get(bsym.sym.id)
            if impl is not None and impl.grad_transform is not None:
                if impl.checker is None or impl.checker(*bsym.args, **bsym.kwargs):
                    return impl.grad_transform
        # (complex numbers: PyTorch's conjugate Wirtinger gradients, not the real rules below)
        rule = complex_grad_rule(bsym)
        if rule is not None:
            return rule
        rule = _grad_rules.get(bsym.sym.id) or getattr(bsym.sym, "grad_rule", None)
        if rule is None and "opaque" in bsym.sym.tags and getattr(bsym.sym, "torch_fn", None) is not None:
            from thunder.transforms.opaque_grads import opaque_grad_rule

            rule = opaque_grad_rule(bsym.sym)
        return rule

    def process(self, bsym: BoundSymbol, forward: list, groups: list) -> None:
        rg = self.requires_grad
        if "grad_source" in bsym.sym.tags:  # a tensor made a leaf requiring grad (x.requires_grad_() inside)
            forward.append(bsym)
            rg.update(o.name for o in bsym.flat_outs if _is_differentiable(o))
            return
        if (
            bsym.sym.python_printer is not None
            or "in_place" in bsym.sym.tags  # writes of new values into inputs (buffer updates) carry no gradient
            or bsym.sym.id in _STOP_GRADIENT  # detach, .data, and the ends of no_grad regions
            or not any(a.name in rg for a in _gradient_inputs(bsym))
        ):
            forward.append(bsym)
            return
        outs = [o for o in bsym.flat_outs if _is_differentiable(o)]
        rule = self._grad_transform(bsym)
        if rule is not None and self._apply_rule(rule, bsym, forward, groups):
            pass  # the rule recorded the forward and the backward
        elif bsym.subsymbols and _draws_random(bsym):
            # recomputing a random decomposition in backward would draw new numbers: the forward runs the
            # decomposition, so the backward uses the very values (masks) the forward drew
            for sub in bsym.subsymbols:
                self.process(sub if sub.source is not None else sub.from_bsym(source=bsym.source), forward, groups)
        elif bsym.subsymbols:
            # forward: the operation itself; backward: its decomposition, recomputed and differentiated
            sub_forward, sub_groups = self.run(bsym.subsymbols)
            recompute = _recomputation(sub_forward, bsym.flat_outs)
            forward.append(bsym)
            groups.append(_Group({o.name: o for o in outs}, recompute=recompute, children=sub_groups))
        elif not outs:
            forward.append(bsym)
            return
        else:
            raise NotImplementedError(
                f"thunder has no gradient rule for {bsym.sym.print_name} and it has no decomposition; "
                "register one with an executor's register_implementation(..., grad_transform=...)"
            )
        rg.update(o.name for o in outs)

    def _apply_rule(self, rule, bsym: BoundSymbol, forward: list, groups: list) -> bool:
        """Records ``rule`` for ``bsym``; False when the rule declined (returned ``NotImplemented``)."""
        trace = self.trace
        scope: list[BoundSymbol] = []
        rec = _GradRecording()
        trace.scopes.append(scope)
        _recording.append(rec)
        try:
            result = rule(*bsym.args, **bsym.kwargs)
        finally:
            _recording.pop()
            trace.scopes.pop()
        if result is NotImplemented:
            return False
        mapping = {}
        for p, o in zip(flat_proxies(result), bsym.flat_outs):
            if p.name != o.name:
                mapping[p.name] = o
        recorded = [b.swap_proxies(mapping) for b in scope]
        cotangent_of = {mapping[n].name if n in mapping else n: c for n, c in rec.cotangents.items()}
        contributions = [(x, mapping.get(g.name, g)) for x, g in rec.contributions]

        backward_names = {c.name for c in cotangent_of.values()}
        bwd = []
        for b in recorded:
            if any(a.name in backward_names for a in b.flat_args):
                bwd.append(b)
                backward_names.update(o.name for o in b.flat_outs)
            else:
                forward.append(b)
        outs = {o.name: o for o in bsym.flat_outs if isinstance(o, TensorProxy)}
        groups.append(_Group(outs, bwd, cotangent_of, contributions))
        return True


def _recomputation(sub_forward: list[BoundSymbol], composite_outs: list) -> list[BoundSymbol]:
    """The forward of a decomposition, to recompute in the backward of the composite that ran whole.

    The composite's own outputs come from the forward, so the operations that make only those are left
    out. An operation that makes one of them and other values too (``nll_loss_forward``'s loss and the
    count of targets a gradient rule saves) is recomputed, its copy of the composite's output renamed:
    the backward may read the other values, and must not define the forward's names again.
    """
    out_names = {o.name for o in composite_outs}
    recompute = []
    for b in sub_forward:
        made_outside = [o for o in b.flat_outs if o.name in out_names]
        if not made_outside:
            recompute.append(b)
        elif len(made_outside) < len(b.flat_outs):
            recompute.append(b.swap_proxies({o.name: _fresh_like(o) for o in made_outside}))
    return recompute


def _fresh_like(p):
    return TensorProxy(like=p) if isinstance(p, TensorProxy) else p


def _gradient_inputs(bsym: BoundSymbol) -> list:
    """The arguments a gradient can flow from (a symbol's ``grad_args`` leading ones; all by default)."""
    n = getattr(bsym.sym, "grad_args", None)
    return bsym.flat_args if n is None else flat_proxies(tuple(bsym.args[:n]))


def build_joint(trace: TraceCtx, requires_grad: set[str], executors) -> tuple[TraceCtx, Joint]:
    """Differentiates ``trace`` (without its return) with respect to the inputs named in ``requires_grad``."""
    work = from_trace(trace)
    d = _Differentiator(work, executors)
    d.requires_grad = set(requires_grad)
    body = [b for b in trace.bound_symbols if b.sym.name != "python_return"]
    global _differentiating
    outer, _differentiating = _differentiating, d
    try:
        with tracectx(work):
            forward, groups = d.run(body)
    finally:
        _differentiating = outer
    return work, Joint(forward, groups, d.requires_grad)


# ---------------------------------------------------------------- the backward program


def zeros_like(p: TensorProxy) -> TensorProxy:
    """A zero gradient for ``p`` (a torch-language ``full``, so any executor can run it)."""
    import thunder.torch as ltorch

    return ltorch.full(p.shape, 0, device=devices.to_torch_device(p.device), dtype=p.dtype.torch_dtype)


def emit_backward(work: TraceCtx, joint: Joint, seeds: dict[str, TensorProxy]) -> tuple[list[BoundSymbol], dict]:
    """Backward bound symbols for ``joint`` given the cotangents ``seeds`` of some forward values.

    Returns the bound symbols and the accumulated gradient of every forward value reached.
    """
    import thunder.torch as ltorch

    acc: dict[str, TensorProxy] = dict(seeds)
    out: list[BoundSymbol] = []

    def emit(groups: list[_Group]) -> None:
        for group in reversed(groups):
            if not any(name in acc for name in group.outputs):
                continue
            if group.children or group.recompute:
                out.extend(group.recompute)
                emit(group.children)
                continue
            mapping = {}
            for name, c in group.cotangents.items():
                g = acc.get(name)
                if g is None:
                    fwd = group.outputs.get(name)
                    g = _record(out, lambda fwd=fwd: zeros_like(fwd))
                mapping[c.name] = g
            for b in group.backward:
                out.append(b.swap_proxies(mapping))
            for x, g in group.contributions:
                g = mapping.get(g.name, g)
                previous = acc.get(x.name)
                if previous is None:
                    acc[x.name] = g
                else:
                    acc[x.name] = _record(out, lambda a=previous, b=g: ltorch.add(a, b))

    with tracectx(work):
        emit(joint.groups)
    return out, acc


def _record(out: list, fn):
    """Runs ``fn`` (which calls symbols) recording into ``out``."""
    from thunder.core.trace import get_tracectx

    trace = get_tracectx()
    trace.scopes.append(out)
    try:
        return fn()
    finally:
        trace.scopes.pop()


def is_float_proxy(p) -> bool:
    return isinstance(p, Proxy) and _is_differentiable(p)
