"""Functions the traced code returns whose closures hold tensors it computed.

``return lambda z: z + y`` hands the caller a closure over a stand-in ``y``; calling it after the
call would use a tensor that only existed while tracing. The program returns the closure's cell
contents as outputs instead, and the caller gets the same function (code, globals, defaults,
attributes) over new cells holding the real values.
"""

from __future__ import annotations

import types

from thunder.core import pytree

__all__ = ["with_returned_closures"]

_EMPTY = object()  # an empty cell (a variable assigned after the function was made)


class _ReturnedFunction:
    """A returned function as a pytree node whose children are its closure's contents."""

    __slots__ = ("fn", "contents")

    def __init__(self, fn: types.FunctionType, contents: list):
        self.fn = fn
        self.contents = contents


def _rebuild(fn: types.FunctionType, contents) -> types.FunctionType:
    cells = tuple(old if value is _EMPTY else types.CellType(value) for old, value in zip(fn.__closure__, contents))
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new


pytree.register_node(_ReturnedFunction, lambda r: (list(r.contents), r.fn), _rebuild)


def _cell_value(cell):
    try:
        return cell.cell_contents
    except ValueError:
        return _EMPTY


def _captures(fn, is_stand_in, depth: int = 0) -> bool:
    if not isinstance(fn, types.FunctionType) or not fn.__closure__ or depth > 4:
        return False
    for cell in fn.__closure__:
        value = _cell_value(cell)
        if value is _EMPTY:
            continue
        pytree.discover_nodes(value)
        for leaf in pytree.tree_leaves(value):
            if is_stand_in(leaf) or _captures(leaf, is_stand_in, depth + 1):
                return True
    return False


def _as_node(fn, is_stand_in):
    contents = []
    for cell in fn.__closure__:
        value = _cell_value(cell)
        if value is not _EMPTY:
            value = pytree.tree_map(lambda x: _as_node(x, is_stand_in) if _captures(x, is_stand_in) else x, value)
        contents.append(value)
    return _ReturnedFunction(fn, contents)


def with_returned_closures(result, is_stand_in, keep=lambda x: False):
    """``result`` with every function whose closure holds a stand-in (``is_stand_in(leaf)``) replaced by a
    node that flattens to the closure's contents; ``result`` itself when there is none. ``keep(x)``:
    subtrees left as they are (the same objects)."""
    pytree.discover_nodes(result)
    leaves = pytree.tree_leaves(result, is_leaf=keep)
    if not any(_captures(leaf, is_stand_in) for leaf in leaves):
        return result
    return pytree.tree_map(lambda x: _as_node(x, is_stand_in) if _captures(x, is_stand_in) else x, result, is_leaf=keep)
