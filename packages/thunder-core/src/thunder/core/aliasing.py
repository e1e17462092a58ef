"""Which arguments a call's outputs may be views or aliases of: one declared property of a symbol.

A symbol declares it by its tags: ``view`` (a view of its first argument: ``reshape``, ``transpose``,
``getitem``) and the shape prims (``OpTags.SHAPE_OP``) may return a view of their first tensor argument;
``alias`` (it may return an argument itself: ``detach``) and ``opaque`` (a torch call run by PyTorch, whose
result PyTorch may make a view of any argument) may return an alias of any tensor argument. Autodiff's
split (what to save before an in-place update overwrites it) and the write-back of updated inputs read this
answer instead of keeping lists of their own.
"""

from __future__ import annotations

from thunder.core.prims import OpTags
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol, Symbol

__all__ = ["may_return_alias", "aliased_argument_positions"]

# tags whose symbols may return a view of their first tensor argument
_VIEW_OF_FIRST = frozenset(("view", OpTags.SHAPE_OP))
# tags whose symbols may return a view or alias of any tensor argument
_ALIAS_OF_ANY = frozenset(("alias", "opaque"))


def may_return_alias(sym: Symbol) -> bool:
    """Whether an executor may run ``sym`` so that an output is a view or alias of an argument."""
    tags = sym.tags  # (four membership tests: asked for every torch call while tracing)
    return "view" in tags or "alias" in tags or "opaque" in tags or OpTags.SHAPE_OP in tags


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
