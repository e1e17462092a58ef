"""Version tags of dicts: a number that changes whenever a dict's contents change.

CPython keeps one per dict (``ma_version_tag`` up to 3.13; PyTorch reads it, or follows the dict with a dict
watcher where the tag is gone), and PyTorch exposes it as ``torch._C._dynamo.guards.dict_version`` for Dynamo's
guards. A prologue compares the tags of the ``__dict__``s of a model's modules with those seen when its checks
of module state last passed: equal tags mean every key still maps to the very same object, so those checks
would pass again and are skipped (``PrologueBuilder``, docs/caching.md).

The tags come from one process-wide counter: a dict's tag never returns to an earlier value, so a change and
its undoing still read as a change.

Up to Python 3.11 a tag is that counter's value itself, so a dict's tag only ever grows. The sum of many dicts'
tags then equals an earlier sum of the same dicts exactly when no tag changed (any change made one term larger
and none smaller): a prologue compares one number instead of a list of them (``tags_only_grow``). From 3.12 the
low bits of a tag say which dict watchers follow the dict, and un-watching lowers the tag, so the tags are
compared one by one there.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["dict_version_function", "tags_only_grow"]

_resolved: list = []
_growing: list = []


def dict_version_function() -> Callable[[dict], int] | None:
    """PyTorch's ``dict_version`` when it behaves as described above on this Python and torch, else ``None``
    (the prologue then checks module state in full on every call)."""
    if not _resolved:
        _resolved.append(_probe())
    return _resolved[0]


def tags_only_grow() -> bool:
    """Whether every change of a dict gives it a tag larger than any it had (Python up to 3.11, checked by a
    probe): a sum of tags is then an exact summary of them (see the module's docstring)."""
    dict_version = dict_version_function()
    if dict_version is None or sys.version_info >= (3, 12):
        return False
    if not _growing:
        _growing.append(_probe_growth(dict_version))
    return _growing[0]


def _probe_growth(dict_version: Callable[[dict], int]) -> bool:
    try:
        d: dict = {}
        last = dict_version(d)
        for i in range(8):
            d[i % 3] = i
            if i % 2:
                d.pop(i % 3)
            version = dict_version(d)
            if version <= last:
                return False
            last = version
    except Exception:  # pragma: no cover - a changed private API: compare the tags one by one
        return False
    return True


def _probe() -> Callable[[dict], int] | None:
    try:
        from torch._C._dynamo.guards import dict_version
    except ImportError:  # pragma: no cover - a torch without Dynamo's guards
        return None
    try:
        d: dict = {"a": 1}
        other: dict = {"a": 1}
        first = dict_version(d)
        if dict_version(d) != first:  # reading it must not change it
            return None
        changes = (
            lambda: d.__setitem__("a", 2),
            lambda: d.__setitem__("b", 3),
            lambda: d.pop("b"),
            lambda: d.update(a=1),
            lambda: d.clear(),
        )
        seen = {first}
        for change in changes:
            change()
            version = dict_version(d)
            if version in seen:  # every change gives a tag never seen before
                return None
            seen.add(version)
        if dict_version(other) in seen:
            return None
        obj = type("_Probe", (), {})()
        obj.x = 1
        attrs = obj.__dict__
        before = dict_version(attrs)
        obj.x = 2  # an attribute assignment through the object (not the dict) changes its __dict__'s tag
        if dict_version(attrs) == before:
            return None
    except Exception:  # pragma: no cover - a changed private API: full checks
        return None
    return dict_version
