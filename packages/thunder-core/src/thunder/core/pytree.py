"""Pytrees: the one way thunder walks nested Python values (arguments, outputs, symbol arguments).

Built on ``optree`` in the ``"thunder"`` namespace, with dict keys kept in insertion order. Besides
optree's own nodes (tuples, lists, dicts, named tuples, ``torch.return_types`` structseqs,
``OrderedDict``, ``defaultdict``, ``deque``), thunder registers:

- ``slice`` (its start, stop and step);
- dataclasses, including Hugging Face ``ModelOutput`` (a dataclass that is also a dict);
- plain Python objects (HF ``DynamicCache`` and its layers, user classes: anything with an instance
  ``__dict__`` that is not a module, function, class or enum), registered the first time a traced
  program meets one (:func:`register_object_type`); their attributes are the children;
- anything registered with :func:`register_node`.

``torch.Size`` is a leaf (a shape, not a container of values to trace).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import types
from collections.abc import Callable
from typing import Any

import optree
import torch

__all__ = [
    "NAMESPACE",
    "tree_flatten",
    "tree_unflatten",
    "tree_leaves",
    "tree_map",
    "register_node",
    "register_object_type",
    "is_registered",
    "discover_nodes",
]

NAMESPACE = "thunder"

# keep dict keys in insertion order (the order user code and traces see), for this namespace only
_insertion_order = optree.dict_insertion_ordered(True, namespace=NAMESPACE)
_insertion_order.__enter__()

_registered: set[type] = set()
_BUILTIN_NODES = (tuple, list, dict)


def register_node(cls: type, flatten: Callable, unflatten: Callable) -> None:
    """Registers ``cls`` as a node: ``flatten(x) -> (children, metadata)``, ``unflatten(metadata, children) -> x``."""
    if cls in _registered:
        return
    optree.register_pytree_node(
        cls,
        lambda x: (*flatten(x), None),
        unflatten,
        namespace=NAMESPACE,
    )
    _registered.add(cls)
    _leaf_types.clear()


def is_registered(cls: type) -> bool:
    return cls in _registered


def tree_flatten(tree: Any, is_leaf: Callable | None = None) -> tuple[list, Any]:
    """``(leaves, treespec)``; ``None`` is a leaf."""
    return optree.tree_flatten(tree, is_leaf, none_is_leaf=True, namespace=NAMESPACE)


def tree_unflatten(spec, leaves) -> Any:
    return optree.tree_unflatten(spec, leaves)


# The trees thunder walks most (a symbol's arguments) are small tuples, lists and dicts of leaves;
# walking those in Python skips optree's per-call cost. Anything else goes to optree, so the answer
# is optree's in every case.
_leaf_types: dict[type, bool] = {}


def _is_leaf_type(t: type, x) -> bool:
    leaf = _leaf_types.get(t)
    if leaf is None:  # a type is a leaf or a node for all its instances (registrations are per type)
        leaf = _leaf_types[t] = optree.tree_structure(x, none_is_leaf=True, namespace=NAMESPACE).is_leaf()
    return leaf


def _plain(x) -> bool:
    """Whether ``x`` is a leaf, or tuples, lists and dicts (exactly those types) down to leaves."""
    t = type(x)
    if t is tuple or t is list or t is dict:
        for y in x.values() if t is dict else x:
            ty = type(y)
            leaf = _leaf_types.get(ty)
            if leaf is None:
                if not _plain(y):
                    return False
            elif not leaf:
                return False
        return True
    return _is_leaf_type(t, x)


def _plain_leaves(x, out: list) -> None:
    t = type(x)
    if t is tuple or t is list:
        for y in x:
            _plain_leaves(y, out)
    elif t is dict:
        for y in x.values():
            _plain_leaves(y, out)
    else:
        out.append(x)


def _plain_map(fn: Callable, x):
    t = type(x)
    if t is tuple or t is list:
        return t(_plain_map(fn, y) for y in x)
    if t is dict:
        return {k: _plain_map(fn, y) for k, y in x.items()}
    return fn(x)


def tree_leaves(tree: Any, is_leaf: Callable | None = None) -> list:
    if is_leaf is None and _plain(tree):
        out: list = []
        _plain_leaves(tree, out)
        return out
    return optree.tree_leaves(tree, is_leaf, none_is_leaf=True, namespace=NAMESPACE)


def tree_map(fn: Callable, tree: Any, is_leaf: Callable | None = None) -> Any:
    if is_leaf is None and _plain(tree):
        return _plain_map(fn, tree)
    return optree.tree_map(fn, tree, is_leaf=is_leaf, none_is_leaf=True, namespace=NAMESPACE)


# ---------------------------------------------------------------- nodes thunder registers

register_node(slice, lambda s: ((s.start, s.stop, s.step), None), lambda _, c: slice(*c))


def _dataclass_node(cls: type) -> None:
    names = tuple(f.name for f in dataclasses.fields(cls))
    if issubclass(cls, dict):  # HF ModelOutput: the set fields are the dict's items, rebuilt by the constructor
        register_node(
            cls,
            lambda x: (list(x.values()), tuple(x.keys())),
            lambda keys, children: cls(**dict(zip(keys, children))),
        )
        return

    def unflatten(meta, children):
        obj = object.__new__(cls)
        for name, value in zip(names, children):
            object.__setattr__(obj, name, value)
        for name, value in meta:  # attributes that are not fields
            object.__setattr__(obj, name, value)
        return obj

    def flatten(x):
        extra = tuple((k, v) for k, v in getattr(x, "__dict__", {}).items() if k not in names)
        return [getattr(x, n) for n in names], extra

    register_node(cls, flatten, unflatten)


_KNOWN_DICTS = (dict, collections.OrderedDict, collections.defaultdict)


def _dict_subclass_node(cls: type) -> None:
    """A user's dict subclass (``class Outputs(OrderedDict)``): its items are children, rebuilt into a new
    instance of ``cls`` (``__init__`` not called) with the same instance attributes."""

    def flatten(x):
        return list(x.values()), (tuple(x.keys()), tuple(getattr(x, "__dict__", {}).items()))

    def unflatten(meta, children):
        keys, attributes = meta
        obj = cls.__new__(cls)
        # (the base class's item setter: the user's __setitem__ may have effects; OrderedDict keeps its order list)
        setitem = collections.OrderedDict.__setitem__ if isinstance(obj, collections.OrderedDict) else dict.__setitem__
        for key, child in zip(keys, children):
            setitem(obj, key, child)
        for name, value in attributes:
            object.__setattr__(obj, name, value)
        return obj

    register_node(cls, flatten, unflatten)


def register_object_type(cls: type) -> None:
    """Registers a plain class as a node whose children are its instance ``__dict__`` (in order).

    A rebuilt object is a new instance of ``cls`` with those attributes (``__init__`` is not called).
    """
    if dataclasses.is_dataclass(cls):
        _dataclass_node(cls)
        return

    def unflatten(keys, children):
        obj = object.__new__(cls)
        obj.__dict__.update(zip(keys, children))
        return obj

    register_node(cls, lambda x: (list(vars(x).values()), tuple(vars(x))), unflatten)


def _is_object_candidate(x) -> bool:
    if isinstance(
        x,
        (
            type,
            types.FunctionType,
            types.MethodType,
            types.BuiltinFunctionType,
            types.ModuleType,
            torch.nn.Module,
            torch.Tensor,
        ),
    ):
        return False
    t = type(x)
    if t.__module__ in ("builtins", "torch", "functools", "enum") or t.__module__.startswith(("thunder.", "torch.")):
        return False
    if isinstance(x, enum.Enum) or (callable(x) and not dataclasses.is_dataclass(x)):
        return False
    return type(getattr(x, "__dict__", None)) is dict or dataclasses.is_dataclass(x)


def _attribute_values(x) -> list:
    """The values a registered object's flattening visits: a dict's values, a dataclass's fields (slotted
    ones included) and instance attributes, or a plain object's instance attributes."""
    if isinstance(x, dict):
        return list(x.values())
    values = list(getattr(x, "__dict__", {}).values())
    if dataclasses.is_dataclass(x):
        values += [getattr(x, f.name) for f in dataclasses.fields(x) if f.name not in getattr(x, "__dict__", {})]
    return values


def discover_nodes(tree: Any) -> None:
    """Registers the types of the objects in ``tree`` that carry tensors (dataclasses, ModelOutput, caches,
    user classes) so that flattening ``tree`` reaches their tensors."""
    _discover(tree, 0)


def _discover(x, depth: int) -> None:
    if depth > 8 or isinstance(x, torch.Tensor) or x is None:
        return
    t = type(x)
    if t in (tuple, list) or (isinstance(x, tuple) and hasattr(x, "_fields")):
        for y in x:
            _discover(y, depth + 1)
        return
    if t is dict or (isinstance(x, dict) and not dataclasses.is_dataclass(x)):
        if t not in _KNOWN_DICTS and t not in _registered:
            _dict_subclass_node(t)
        for y in x.values():
            _discover(y, depth + 1)
        return
    if t in _registered:
        for y in _attribute_values(x):
            _discover(y, depth + 1)
        return
    if (dataclasses.is_dataclass(x) and not isinstance(x, type)) or _is_object_candidate(x):
        register_object_type(t)
        for y in _attribute_values(x):
            _discover(y, depth + 1)
