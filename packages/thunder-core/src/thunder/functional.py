"""``thunder.functional.jit``: compiles a function and returns a plain function (never a module wrapper)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import torch

from thunder.compiler import build_compile_data, make_compiled

__all__ = ["jit"]


def jit(
    fn: Callable,
    /,
    *,
    langctx=None,
    executors: Sequence | None = None,
    cache="constant values",
    transforms=None,
    disable_torch_autograd: bool = False,
    **compile_options,
) -> Callable:
    """Just-in-time compile a function.

    Module arguments are traced with their parameters and buffers as inputs; a module given as
    ``fn`` is compiled as the function ``module.forward``.
    """
    cd = build_compile_data(
        fn,
        executors=executors,
        cache=cache,
        transforms=transforms,
        disable_torch_autograd=disable_torch_autograd,
        compile_options=compile_options,
    )
    compiled = make_compiled(cd)
    if not isinstance(fn, torch.nn.Module):
        functools.update_wrapper(compiled, fn)
    compiled._lc_cd = cd
    return compiled
