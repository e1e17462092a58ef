"""Public home of thunder's autodiff API (``grad``, ``vjp``, ``value_and_grad``, ``get_grad``, ``put_grad(s)``).

The implementation lives in :mod:`thunder.transforms`; this module re-exports it under the
name users and executors rely on.
"""

from thunder.transforms.autodiff import get_grad, put_grad, put_grads, register_grad
from thunder.transforms.functional import grad, value_and_grad, vjp

__all__ = ["grad", "vjp", "value_and_grad", "get_grad", "put_grad", "put_grads", "register_grad"]
