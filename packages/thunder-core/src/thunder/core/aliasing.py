"""Which arguments a call's outputs may be views or aliases of: one declared property of a symbol.

A symbol declares it by its tags: ``view`` (a view of its first argument: ``reshape``, ``transpose``,
``getitem``) and the shape prims (``OpTags.SHAPE_OP``) may return a view of their first tensor argument;
``alias`` (it may return an argument itself: ``detach``) and ``opaque`` (a torch call run by PyTorch, whose
result PyTorch may make a view of any argument) may return an alias of any tensor argument;
``opaque_keeping_rng_state`` (an opaque call that also returns the random generator's state from before it
ran, for its gradient) may return an alias of any tensor argument as its first output, the state is fresh.

A bound symbol that stands for others answers for them: an executor's call (a claimed symbol, a fusion
region) for the calls it runs (its direct sub-symbols), a torch-language symbol nobody has claimed yet for
its decomposition, which an executor may run instead (``flatten`` through ``reshape``).

Every pass asks this module: the tracer (whether a call's shadow must run), the split (what to save before
an in-place update overwrites it), the write-back of updated inputs and the in-place state updates.
"""

from __future__ import annotations

from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_leaves
from thunder.core.symbol import BoundSymbol, Symbol

__all__ = [
    "OPAQUE_KEEPING_RNG_STATE",
    "may_return_alias",
    "returns_view_of_first_argument",
    "aliased_argument_positions",
    "aliased_outputs",
    "may_alias_an_argument",
]

OPAQUE_KEEPING_RNG_STATE = "opaque_keeping_rng_state"

# tags whose symbols may return a view of their first tensor argument
_VIEW_OF_FIRST = frozenset(("view", OpTags.SHAPE_OP))
# tags whose symbols may return a view or alias of any tensor argument
_ALIAS_OF_ANY = frozenset(("alias", "opaque", OPAQUE_KEEPING_RNG_STATE))


def may_return_alias(sym: Symbol) -> bool:
    """Whether an executor may run ``sym`` so that an output is a view or alias of an argument."""
    tags = sym.tags  # (a few membership tests: asked for every torch call while tracing)
    return (
        "view" in tags
        or "alias" in tags
        or "opaque" in tags
        or OpTags.SHAPE_OP in tags
        or OPAQUE_KEEPING_RNG_STATE in tags
    )


def returns_view_of_first_argument(sym: Symbol) -> bool:
    """Whether ``sym`` declares itself a view op: its outputs are views of its first tensor argument."""
    return "view" in sym.tags


def aliased_argument_positions(bsym: BoundSymbol) -> tuple[int, ...]:
    """The positions in ``bsym.flat_args`` of the tensor arguments whose memory ``bsym``'s outputs may share.

    The first tensor argument of a view or shape op (when it comes first), every tensor argument of an
    ``alias`` or ``opaque`` symbol, none otherwise (a fresh result: ``add``, ``sum``). A superset of what
    eager does: ``reshape`` of a non-contiguous tensor copies, but may be a view.
    """
    tags = bsym.sym.tags
    args = bsym.flat_args
    if any(t in _ALIAS_OF_ANY for t in tags):
        return tuple(i for i, a in enumerate(args) if isinstance(a, TensorProxy))
    if any(t in _VIEW_OF_FIRST for t in tags) and args and isinstance(args[0], TensorProxy):
        return (0,)
    return ()


def aliased_outputs(bsym: BoundSymbol) -> list[TensorProxy]:
    """The outputs of ``bsym`` that may share memory with the arguments at ``aliased_argument_positions``."""
    if not aliased_argument_positions(bsym):
        return []
    out = bsym.output
    if OPAQUE_KEEPING_RNG_STATE in bsym.sym.tags and isinstance(out, (tuple, list)) and out:
        out = out[0]  # (the generator's state is a fresh tensor)
    return [o for o in tree_leaves(out) if isinstance(o, TensorProxy)]


def may_alias_an_argument(bsym: BoundSymbol) -> bool:
    """Whether an executor may run ``bsym`` so that one of its outputs is a view or alias of an argument.

    The symbol's own declaration (``may_return_alias``); else, for an executor's call (``bsym.sym.executor``
    is set: a claimed symbol, a fusion region), the declaration of any call it runs (its direct sub-symbols,
    whose own decompositions do not matter: ``repeat_interleave``'s expand does not make its result a view);
    else, for a symbol nobody claimed yet, whether its decomposition computes an output as a view of an
    argument (``flatten``, not ``batch_norm``, whose decomposition reshapes only its statistics).
    """
    if may_return_alias(bsym.sym):
        return True
    subsymbols = bsym.subsymbols
    if not subsymbols:
        return False
    if bsym.sym.executor is not None:
        return any(may_return_alias(s.sym) for s in subsymbols)
    may = {a.name for a in bsym.flat_args if isinstance(a, TensorProxy)}
    for sub in subsymbols:
        if any(isinstance(a, TensorProxy) and a.name in may for a in sub.flat_args) and may_alias_an_argument(sub):
            may.update(o.name for o in sub.flat_outs if isinstance(o, TensorProxy))
    return any(isinstance(o, TensorProxy) and o.name in may for o in bsym.flat_outs)
