"""How torch-language symbols are declared and how torch callables map to them.

``@torchsymbol(torch.add, torch.Tensor.add, method_name="add")`` turns a function written in
terms of the core language into a symbol, maps the given torch callables to it (the tracer uses
that map) and makes it a ``TensorProxy`` method. In-place variants map to an
:class:`InplaceOp`, which the tracer functionalises.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from thunder.core.proxies import register_method
from thunder.core.symbol import Symbol

__all__ = ["torchsymbol", "torch_to_thunder", "InplaceOp", "register_torch_alias", "LTORCH_IMPORT"]

LTORCH_IMPORT = "import thunder.torch as ltorch"

# torch callable -> Symbol, adapter function, or InplaceOp
torch_to_thunder: dict[Any, Any] = {}
# every torch-language symbol by name
symbols_by_name: dict[str, Symbol] = {}


class InplaceOp:
    """``torch_fn`` updates its argument ``arg_index`` in place with ``fn``'s result.

    ``fn`` returns the new value (or, with ``returns`` set, a tuple whose first element is the
    user-visible result and the rest new values for ``mutated_args``).
    """

    __slots__ = ("fn", "arg_index", "mutated_args", "returns_self")

    def __init__(self, fn: Callable, arg_index: int = 0, mutated_args: tuple[int, ...] | None = None):
        self.fn = fn
        self.arg_index = arg_index
        self.mutated_args = mutated_args
        self.returns_self = mutated_args is None


def torchsymbol(
    *torch_fns,
    name: str | None = None,
    method_name: str | None = None,
    tags=(),
    id: str | None = None,
    grad_args: int | None = None,
):
    """Declares a torch-language symbol implemented by the decorated function.

    ``grad_args``: how many leading positional arguments the result can be differentiated by (None: all).
    A tensor after them is read for its metadata only (``x.type_as(other)``, ``x.to(other)``): it requiring
    grad does not make the result require grad, as in eager.
    """

    def decorator(fn: Callable) -> Symbol:
        sym_name = name or fn.__name__
        sym = Symbol(
            sym_name,
            fn,
            id=id or f"torch.{sym_name}",
            print_name=f"ltorch.{sym_name}",
            imports=(LTORCH_IMPORT,),
            tags=tags,
            method_name=method_name,
        )
        sym.__doc__ = fn.__doc__
        sym.__wrapped__ = fn
        sym.torch_fns = torch_fns
        sym.grad_args = grad_args
        # F.relu(x, inplace=True): the tracer computes out of place and updates x (see Tracer.record_call)
        params = list(inspect.signature(fn).parameters)
        sym.inplace_param = params.index("inplace") if "inplace" in params else None
        for tf in torch_fns:
            torch_to_thunder[tf] = sym
        if method_name:
            register_method(method_name, sym)
        symbols_by_name[sym_name] = sym
        return sym

    return decorator


def register_torch_alias(torch_fn, target) -> None:
    torch_to_thunder[torch_fn] = target
