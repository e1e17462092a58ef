"""The callable ``thunder.jit`` returns: a generated function with the user's signature that calls the prologue
of the program that answered last, and takes the slow path (other cache entries, compiling) on a miss. An error a
compiled program raises gets a note naming the user's line that raised it (``codegen.note_user_line``).

With the user's own parameters, the common call passes its arguments on as they are: no ``*args``/``**kwargs``
packing, which costs about as much as the rest of the call path (a tenth of eager ``a + b``).
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from typing import Any

from thunder.core.codegen import note_user_line

__all__ = ["make_entry_point"]

_PREFIX = "_thunder_"  # the generated function's own names; a parameter with this prefix gets the generic form


def make_entry_point(
    fn: Callable, name: str, fast: list[Callable], slow_path: Callable, miss: Any
) -> Callable[..., Any]:
    """A function with ``fn``'s signature (when it has one) that returns ``fast[0](...)`` unless that is ``miss``,
    else ``slow_path(prologue_tried, args, kwargs)``.

    ``fast[0]`` is read on every call, so replacing it redirects the next call.
    """
    namespace: dict[str, Any] = {
        f"{_PREFIX}fast": fast,
        f"{_PREFIX}slow": slow_path,
        f"{_PREFIX}miss": miss,
        f"{_PREFIX}note": note_user_line,
    }
    source = _source(fn, _identifier(name))
    exec(compile(source, f"<thunder entry point of {name}>", "exec"), namespace)  # noqa: S102 - generated above
    entry = namespace[f"{_PREFIX}entry"]
    entry.__qualname__ = name  # (named in the TypeError of a call that does not match the signature)
    return entry


def _identifier(name: str) -> str:
    short = name.rsplit(".", 1)[-1]
    usable = short.isidentifier() and not keyword.iskeyword(short) and not short.startswith(_PREFIX)
    return short if usable else "thunder_compiled"


def _function(name: str, parameters: str, call: str, args: str, kwargs: str) -> str:
    """The entry point's source: ``call`` passes the arguments to the prologue, ``args`` and ``kwargs`` rebuild them
    for the slow path."""
    p = _PREFIX
    return (
        f"def {name}({parameters}):\n"
        f"    try:\n"
        f"        {p}p = {p}fast[0]\n"
        f"        {p}r = {p}p({call})\n"
        f"        if {p}r is {p}miss: return {p}slow({p}p, {args}, {kwargs})\n"
        f"        return {p}r\n"
        f"    except Exception as {p}e:\n"
        f"        {p}note({p}e)\n"
        f"        raise\n"
        f"{p}entry = {name}\n"
    )


def _generic(name: str) -> str:
    return _function(name, "*args, **kwargs", "*args, **kwargs", "args", "kwargs")


def _source(fn: Callable, name: str) -> str:
    try:
        # the parameters of the function that is called, not of one it wraps (``functools.wraps`` sets
        # ``__wrapped__``): a wrapper ``(*args, **kwargs)`` may tell a keyword argument from a positional one
        signature = inspect.signature(fn, follow_wrapped=False)
    except (ValueError, TypeError):  # builtins: no introspectable signature
        return _generic(name)
    params = list(signature.parameters.values())
    # defaults: the function's __defaults__ may change after jit (and the program with them), so a call that
    # leaves them out must reach the prologue without them: the generic form
    if any(p.name.startswith(_PREFIX) or p.name == name or p.default is not p.empty for p in params):
        return _generic(name)
    header, positional, keyword = [], [], []
    star = starstar = None
    seen_kwonly = False
    for i, p in enumerate(params):
        if p.kind is p.VAR_POSITIONAL:
            header.append(f"*{p.name}")
            star, seen_kwonly = p.name, True
            continue
        if p.kind is p.VAR_KEYWORD:
            header.append(f"**{p.name}")
            starstar = p.name
            continue
        if p.kind is p.KEYWORD_ONLY and not seen_kwonly:
            header.append("*")
            seen_kwonly = True
        header.append(p.name)
        if p.kind is p.KEYWORD_ONLY:
            keyword.append(p.name)
        else:
            positional.append(p.name)
        if p.kind is p.POSITIONAL_ONLY and not any(q.kind is q.POSITIONAL_ONLY for q in params[i + 1 :]):
            header.append("/")
    call = [*positional, *([f"*{star}"] if star else []), *(f"{k}={k}" for k in keyword)]
    call += [f"**{starstar}"] if starstar else []
    args = "(" + "".join(f"{a}, " for a in [*positional, *([f"*{star}"] if star else [])]) + ")"
    kwargs = "{" + ", ".join([*(f"{k!r}: {k}" for k in keyword), *([f"**{starstar}"] if starstar else [])]) + "}"
    return _function(name, ", ".join(header), ", ".join(call), args, kwargs)
