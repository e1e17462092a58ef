"""Eager's refusal of an op on a dtype its CPU kernel lacks, raised where the op is traced.

``torch.abs`` of a bool tensor, ``F.gelu`` of one, ``relu`` of a bool or ``-`` of a bool tensor raise in eager
("not implemented for 'Bool'", "... is not supported"), whether or not their result is used. Thunder learns an op's
result from its metadata and drops computations nothing uses: without this check, an unused one ran where eager
raised, and a used one raised only when the program ran, away from the user's line.

So the first call of an op with an argument that is not floating point (bool, integer, complex), or with a tensor
argument and a ``dtype`` that is not (``x.softmax(0, dtype=torch.bool)``), on the CPU is run
once on tiny tensors of the same dtypes (one element per dimension, none where the argument has none: an empty
tensor's call never reaches the kernel's dtype switch), and eager's dtype refusal is raised at the user's line. The
answer is remembered per op, argument dtypes and plain values. The random number generator's state is put back
after the probe.
"""

from __future__ import annotations

import re
import warnings

import torch

from thunder.core.pytree import tree_leaves, tree_map
from thunder.core.symbolic import hints

__all__ = ["COMPLEX_AUTOGRAD_REFUSAL", "refuse_unsupported_dtypes"]

# autograd's refusal of an op without a complex derivative ("silu does not support automatic differentiation for
# outputs with complex dtype"), raised by the call when an argument requires grad
COMPLEX_AUTOGRAD_REFUSAL = "does not support automatic differentiation for outputs with complex dtype"
_PLAIN = (bool, int, float, str, type(None), torch.dtype)
# eager's wording for a kernel without the dtype: the dispatch macro's, and the explicit checks of -, relu, ...
_REFUSAL = re.compile(
    r"not implemented for '|(bool|Bool|Boolean).* (is )?not supported|not supported for (bool|Bool)"
    # (and complex numbers': "In-place abs is not supported for complex tensors.", "floor is not supported for complex
    # inputs", "torch.sign is not intended to support complex numbers", "Sort does not support complex dtypes")
    r"|not (yet )?(supported|implemented) for complex|not intended to support complex|does not support complex"
    # (and autograd's, for an op without a complex derivative)
    rf"|{re.escape(COMPLEX_AUTOGRAD_REFUSAL)}"
)
_SKIPPED = re.compile(r"dropout|attention|generator|rand|bernoulli|multinomial|normal|uniform")
_LIMIT = 4096
_answers: dict[tuple, Exception | None] = {}


def refuse_unsupported_dtypes(func, args, kwargs) -> None:
    """Raises eager's error where ``func`` refuses its arguments' dtypes on the CPU (see the module docstring).
    ``args`` and ``kwargs``: the tracing stand-ins as the user passed them."""
    with torch._C.DisableTorchFunction():
        if not any(map(_suspect, args)) and not any(map(_suspect, kwargs.values())):
            if not (_names_other_dtype(args, kwargs) and any(isinstance(a, torch.Tensor) for a in args)):
                return  # (floating-point tensors and numbers only: most calls)
        if _SKIPPED.search(getattr(func, "__name__", "")) or any(_SKIPPED.search(k) for k in kwargs):
            return  # (random draws and attention: their kernels are chosen and checked elsewhere)
        if torch._C._are_functorch_transforms_active():
            return  # (inside torch.vmap: the probe's plain calls would run at the transform's level)
        leaves = tree_leaves((args, kwargs))
        tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
        if any(t.device.type != "cpu" for t in tensors) or any(
            not isinstance(x, (torch.Tensor, *_PLAIN)) for x in leaves
        ):
            return
        grad = torch.is_grad_enabled()
        key = (
            func,
            tuple(
                (x.dtype, x.dim(), 0 in hints(x.shape), grad and x.requires_grad)
                if isinstance(x, torch.Tensor)
                else (type(x), x)
                for x in leaves
            ),
            tuple(kwargs),
        )
        try:
            error = _answers.get(key, False)
        except TypeError:  # (an unhashable value)
            return
        if error is False:
            error = _probe(func, args, kwargs)
            if len(_answers) >= _LIMIT:
                _answers.clear()
            _answers[key] = error
    if error is not None:
        raise type(error)(str(error))


def _suspect(x) -> bool:
    """Whether ``x`` is, or a list or tuple holding, a tensor that is not floating point."""
    if isinstance(x, torch.Tensor):
        return not x.is_floating_point()
    if type(x) in (tuple, list):
        return any(isinstance(y, torch.Tensor) and not y.is_floating_point() for y in x)
    return False


def _names_other_dtype(args, kwargs) -> bool:
    """Whether a ``dtype`` argument names a dtype that is not floating point (``x.softmax(0, dtype=torch.bool)``:
    the kernel runs in that dtype)."""
    return any(type(x) is torch.dtype and not x.is_floating_point for x in (*args, *kwargs.values()))


def _tiny(x, grad: bool = False):
    if not isinstance(x, torch.Tensor):
        return x
    shape = [0 if n == 0 else 1 for n in hints(x.shape)]
    tiny = torch.zeros(shape, dtype=x.dtype)
    # (requiring grad as the argument does, where autograd records the call: its refusals of complex outputs; not a
    # leaf, which an in-place op would refuse before its dtype)
    if grad and x.requires_grad and (x.is_floating_point() or x.is_complex()):
        return tiny.requires_grad_().clone()
    return tiny


def _probe(func, args, kwargs) -> Exception | None:
    # (the generator's own methods: torch.get_rng_state/set_rng_state are recorded into the program while tracing)
    generator = torch.default_generator
    state = generator.get_state()
    grad = torch.is_grad_enabled()

    def tiny(x):
        return _tiny(x, grad)

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            func(*tree_map(tiny, args), **tree_map(tiny, kwargs))
    except (RuntimeError, NotImplementedError, TypeError) as e:
        message = str(e).split("\n")[0]
        return e if _REFUSAL.search(message) else None
    except Exception:  # noqa: BLE001 - any other failure of the probe says nothing about dtypes
        return None
    finally:
        generator.set_state(state)
    return None
