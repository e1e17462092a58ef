"""Dead-code elimination over bound symbols, shared by the executor passes and the autodiff split."""

from __future__ import annotations

from collections.abc import Sequence

from thunder.core import prims
from thunder.core.prims import OpTags
from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol

__all__ = ["has_side_effects", "eliminate_dead_code"]

_SIDE_EFFECT_TAGS = (OpTags.DONT_DCE, OpTags.RANDOM, OpTags.IN_PLACE, "random")


def has_side_effects(bsym: BoundSymbol) -> bool:
    """In-place writes and random number draws (which advance the generator) must run even if unused."""
    if any(tag in bsym.sym.tags for tag in _SIDE_EFFECT_TAGS):
        return True
    return any(has_side_effects(sub) for sub in bsym.subsymbols)


def _keep(bsym: BoundSymbol) -> bool:
    return bsym.sym is prims.python_return or has_side_effects(bsym)


def _drop_unused_outputs(output, needed: set[str]):
    if isinstance(output, Proxy):
        return output if output.name in needed else None
    if isinstance(output, tuple) and type(output) is tuple:
        return tuple(_drop_unused_outputs(o, needed) for o in output)
    if isinstance(output, list):
        return [_drop_unused_outputs(o, needed) for o in output]
    return output


def eliminate_dead_code(bsyms: Sequence[BoundSymbol], *, drop_unused_outputs: bool = False) -> list[BoundSymbol]:
    """``bsyms`` without those none of whose outputs is used (side effects and returns are kept).

    With ``drop_unused_outputs``, a kept symbol's unused outputs become ``None`` (printed ``_``).
    """
    needed: set[str] = set()
    kept: list[BoundSymbol] = []
    for bsym in reversed(bsyms):
        outs = bsym.flat_outs
        # (whether an output is needed is the cheap question: asked first; side effects walk decompositions)
        if any(o.name in needed for o in outs) or _keep(bsym):
            if drop_unused_outputs and outs and any(o.name not in needed for o in outs):
                bsym = bsym.from_bsym(output=_drop_unused_outputs(bsym.output, needed))
            needed.update(a.name for a in bsym.flat_args)
            kept.append(bsym)
    return kept[::-1]
