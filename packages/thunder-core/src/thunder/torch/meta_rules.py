"""Shape rules for torch operations PyTorch has no meta kernel for, run opaquely by PyTorch.

An operation with no torch-language symbol is traced as an opaque symbol whose output metadata comes from
running it on the ``meta`` device (``thunder.tracing.fallback``). A few operations have no meta kernel
(``torch.linalg.lstsq``, ``F.ctc_loss``): for those, a rule written here takes the meta (or fake) stand-ins
of the arguments and returns meta stand-ins of the outputs, shaped and typed as eager's, each output
requiring grad exactly when eager's autograd differentiates it (so the opaque gradient, PyTorch's own
backward re-run, covers the outputs eager's does). The operation itself still runs as PyTorch's kernel.

A rule raises ``RuntimeError`` where eager refuses the arguments before computing (eager's message), and
``ValuesDecideShape`` where an output's shape depends on tensor values (the tracer turns that into its
data-dependent error naming the user's line, or, where only a size depends on them, runs the rule again on
fake tensors, where it gives that size as a symbol read from the output when the program runs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

__all__ = ["ValuesDecideShape", "meta_rule_for", "register_meta_rule"]

_RULES: dict[Callable, Callable] = {}


class ValuesDecideShape(Exception):
    """An output's shape depends on tensor values (``what`` says which and why). With ``sized_later``, only a
    size does (not the rank): run on fake tensors, the rule gives it as a size read from the output when the
    program runs (as ``nonzero``'s)."""

    def __init__(self, what: str, *, sized_later: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.sized_later = sized_later


def register_meta_rule(*funcs: Callable) -> Callable[[Callable], Callable]:
    """Registers the decorated rule as the metadata of ``funcs`` (torch callables) when run opaquely."""

    def decorate(rule: Callable) -> Callable:
        for f in funcs:
            _RULES[f] = rule
        return rule

    return decorate


def meta_rule_for(func: Callable) -> Callable | None:
    """The shape rule of the torch callable ``func``, or None (run it on the meta device)."""
    try:
        return _RULES.get(func)
    except TypeError:  # an unhashable callable
        return None


def _tracks_grad(*inputs) -> bool:
    return torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)


def _empty(shape, dtype, like: torch.Tensor, *, requires_grad: bool = False) -> torch.Tensor:
    out = torch.empty(tuple(shape), dtype=dtype, device=like.device)
    return out.requires_grad_() if requires_grad else out


def _real(dtype: torch.dtype) -> torch.dtype:
    return dtype.to_real() if dtype.is_complex else dtype


# ---------------------------------------------------------------- torch.linalg.lstsq

_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


@register_meta_rule(torch.linalg.lstsq)
def lstsq_meta(A, B, rcond=None, *, driver=None):
    """``(solution, residuals, rank, singular_values)`` as eager's ``torch.linalg.lstsq`` returns them.

    Eager's shapes: the solution is ``(*batch, n, k)`` (``(*batch, n)`` when ``B`` has one dimension less than
    ``A``: a vector right-hand side); the residuals ``(*batch, k)`` when ``m > n`` and the driver is ``gels``
    (``gelsd``/``gelss`` only when every matrix has full rank: for one matrix a size read when the program runs,
    for a batch a data-dependent error), else ``(0,)``; the rank
    ``(*batch)`` (``(0,)`` for ``gels``); the singular values ``(*batch, min(m, n))`` for ``gelsd``/``gelss``,
    else ``(0,)``. Only the solution and the residuals are differentiable.
    """
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    if B.ndim < 1:
        raise RuntimeError("torch.linalg.lstsq: other must have at least 1 dimension.")
    if A.dtype != B.dtype:
        raise RuntimeError(
            "torch.linalg.lstsq: Expected input and other to have the same dtype, but got input's dtype "
            f"{A.dtype} and other's dtype {B.dtype}"
        )
    if not (A.dtype.is_floating_point or A.dtype.is_complex) or A.dtype in (torch.float16, torch.bfloat16):
        raise RuntimeError("torch.linalg.lstsq: only float, double, cfloat and cdouble inputs are supported")
    if driver is None:
        driver = "gels" if A.device.type == "cuda" else "gelsy"
    elif driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)")
    vector = B.ndim == A.ndim - 1
    B_mat_shape = (*B.shape, 1) if vector else tuple(B.shape)
    m, n = A.shape[-2], A.shape[-1]
    if B_mat_shape[-2] != m:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    k = B_mat_shape[-1]
    batch = tuple(torch.broadcast_shapes(tuple(A.shape[:-2]), B_mat_shape[:-2]))
    real = _real(A.dtype)
    grad = _tracks_grad(A, B)
    solution = _empty((*batch, n) if vector else (*batch, n, k), A.dtype, A, requires_grad=grad)
    residuals_shape = (*batch, k) if m > n and driver == "gels" else (0,)
    if m > n and driver in ("gelsd", "gelss"):
        # eager returns the residuals (k,) only when the matrix has full rank, else (0,): for one matrix a size
        # read from the output when the program runs; for a batch even the rank of the residuals varies
        size = _unbacked_size(A) if not batch else None
        if size is None:
            raise ValuesDecideShape(
                f"run torch.linalg.lstsq with driver={driver!r} on {'a batch of ' if batch else ''}tall matrices "
                f"({m} x {n}): eager returns the residuals only when every matrix has full rank, so their shape "
                "depends on the values (driver='gels' always returns them, driver='gelsy' never)",
                sized_later=not batch,
            )
        residuals_shape = (size,)
    residuals = _empty(residuals_shape, real, A, requires_grad=grad)
    rank = _empty((0,) if driver == "gels" else batch, torch.int64, A)
    singular_values = _empty((*batch, min(m, n)) if driver in ("gelsd", "gelss") else (0,), real, A)
    return torch.return_types.linalg_lstsq((solution, residuals, rank, singular_values))


# ---------------------------------------------------------------- F.ctc_loss


@register_meta_rule(F.ctc_loss, torch.ctc_loss)
def ctc_loss_meta(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """Eager's CTC loss: ``(N,)`` for ``reduction="none"`` on batched ``(T, N, C)`` log-probabilities, else a
    0-d tensor, in the log-probabilities' dtype; differentiable in the log-probabilities only. (The lengths
    and the targets' values are checked by the kernel when the program runs, as in eager.)"""
    if isinstance(reduction, int):  # torch.ctc_loss takes the reduction as its enum: 0 none, 1 mean, 2 sum
        reduction = ("none", "mean", "sum")[reduction]
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if log_probs.ndim not in (2, 3):
        raise RuntimeError(f"ctc_loss: log_probs must be 2-D (unbatched) or 3-D (batched), got {log_probs.ndim}-D")
    if not (log_probs.dtype.is_floating_point):
        raise RuntimeError(f"ctc_loss: expected floating-point log_probs, got {log_probs.dtype}")
    shape = (log_probs.shape[1],) if reduction == "none" and log_probs.ndim == 3 else ()
    return _empty(shape, log_probs.dtype, log_probs, requires_grad=_tracks_grad(log_probs))


# ---------------------------------------------------------------- torch.istft


@register_meta_rule(torch.istft, torch.Tensor.istft)
def istft_meta(
    a,
    n_fft,
    hop_length=None,
    win_length=None,
    window=None,
    center=True,
    normalized=False,
    onesided=None,
    length=None,
    return_complex=False,
):
    """Eager's inverse STFT: ``(*batch, L)`` from a complex ``(*batch, freq, frames)``, real unless
    ``return_complex``; ``L`` is ``length`` if given, else ``n_fft + hop_length * (frames - 1)`` less ``n_fft``
    (two halves) when ``center``. (Eager's kernel checks the window's overlap-add, a check on its values, when
    the program runs.)"""
    if not a.dtype.is_complex:
        raise RuntimeError(
            "istft requires a complex-valued input tensor matching the output from stft with return_complex=True."
        )
    if a.ndim not in (2, 3):
        raise RuntimeError(f"istft: expected a tensor with 2 or 3 dimensions of complex, but got {a.ndim}")
    hop_length = n_fft // 4 if hop_length is None else hop_length
    win_length = n_fft if win_length is None else win_length
    if not 0 < win_length <= n_fft:
        raise RuntimeError(f"istft: expected 0 < win_length <= n_fft, but got win_length={win_length}")
    if hop_length <= 0 or hop_length > win_length:
        raise RuntimeError(f"istft: expected 0 < hop_length <= win_length, but got hop_length={hop_length}")
    if window is not None and (window.ndim != 1 or window.shape[0] != win_length):
        raise RuntimeError(
            f"istft: expected a 1D window tensor of size equal to win_length={win_length}, but got window with "
            f"size {list(window.shape)}"
        )
    freq, frames = a.shape[-2], a.shape[-1]
    if onesided is None:
        onesided = freq != n_fft
    if freq != (n_fft // 2 + 1 if onesided else n_fft):
        raise RuntimeError(
            "istft: expected the frequency dimension (3rd to the last) of the input tensor to match "
            f"{'n_fft / 2 + 1 when onesided=True' if onesided else 'n_fft when onesided=False'}, but got {freq}"
        )
    if frames < 1:
        raise RuntimeError("istft: input tensor cannot be empty.")
    if return_complex and onesided:
        raise RuntimeError("cannot have onesided output if window or input is complex")
    if length is not None:
        size = length
    else:
        size = n_fft + hop_length * (frames - 1) - (2 * (n_fft // 2) if center else 0)
    dtype = a.dtype if return_complex else _real(a.dtype)
    grad = _tracks_grad(a, window)
    return _empty((*a.shape[:-2], size), dtype, a, requires_grad=grad)


# ---------------------------------------------------------------- F.one_hot


def _unbacked_size(a):
    """A new size symbol read from the output when the program runs, if ``a`` is a fake tensor (else None)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(a, FakeTensor) and a.fake_mode.shape_env is not None:
        return a.fake_mode.shape_env.create_unbacked_symint()
    return None


@register_meta_rule(F.one_hot)
def one_hot_meta(a, num_classes=-1):
    """Eager's ``F.one_hot``: int64 ``(*a.shape, num_classes)``; with ``num_classes=-1`` the class count is the
    largest value plus one, a size read from the output when the program runs."""
    if a.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if a.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = _unbacked_size(a)
        if num_classes is None:
            raise ValuesDecideShape(
                "run F.one_hot without num_classes (the class count is the largest value plus one)", sized_later=True
            )
    elif num_classes < -1:
        raise RuntimeError("num_classes should be positive")
    return _empty((*a.shape, num_classes), torch.int64, a)


# ---------------------------------------------------------------- unique, unique_consecutive

_UNIQUES = (torch.unique, torch.Tensor.unique, torch.unique_consecutive, torch.Tensor.unique_consecutive)


def _unique_rule(func: Callable) -> Callable:
    def unique_meta(a, *args, **kwargs):
        """Eager's ``unique``/``unique_consecutive``: the count of distinct values is read from the output when the
        program runs, except for a tensor of at most one element, whose result has as many elements whatever its
        value (so a program may read that size: ``v.shape[-1]`` of a 0-d tensor's unique)."""
        if isinstance(a.numel(), int) and a.numel() <= 1:
            with torch.no_grad():
                results = func(torch.zeros(tuple(a.shape), dtype=a.dtype), *args, **kwargs)
            grad = _tracks_grad(a)
            if isinstance(results, torch.Tensor):
                return _empty(results.shape, results.dtype, a, requires_grad=grad and results.is_floating_point())
            return tuple(
                _empty(r.shape, r.dtype, a, requires_grad=grad and k == 0 and r.is_floating_point())
                for k, r in enumerate(results)
            )
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(a, FakeTensor):
            raise ValuesDecideShape("run unique (how many values are distinct depends on them)", sized_later=True)
        return func(a, *args, **kwargs)

    return unique_meta


for _unique in _UNIQUES:
    register_meta_rule(_unique)(_unique_rule(_unique))


# ---------------------------------------------------------------- torch.cov, torch.corrcoef (complex inputs)


def _covariance_rule(func: Callable) -> Callable:
    """``torch.cov``/``torch.corrcoef``: the covariance of the rows of a matrix (a vector is one row), shaped
    ``(rows, rows)`` with size-1 dims dropped. Thunder's decompositions take real inputs; a complex one runs
    opaquely, and eager's kernel checks its weights' values (``aten::equal``), which the meta device lacks. The
    dtype and eager's refusals come from running it on ones of the arguments' dtypes (one row, two columns)."""

    def rule(a, *args, **kwargs):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"{func.__name__}(): argument 'input' must be Tensor")
        if a.ndim > 2:
            raise RuntimeError(
                f"{func.__name__}(): expected input to have two or fewer dimensions but got an input with "
                f"{a.ndim} dimensions"
            )

        def one_row(t):
            if not isinstance(t, torch.Tensor):
                return t
            return torch.ones([1] * (t.ndim - 1) + [2] if t.ndim else [], dtype=t.dtype)

        # (weights of one row's observations: two, as the one row's)
        probe = func(
            one_row(a) if a.ndim else torch.ones((), dtype=a.dtype),
            *map(one_row, args),
            **{k: one_row(v) for k, v in kwargs.items()},
        )
        rows = a.shape[0] if a.ndim == 2 else 1
        shape = () if rows == 1 else (rows, rows)
        differentiable = probe.dtype.is_floating_point or probe.dtype.is_complex
        return _empty(shape, probe.dtype, a, requires_grad=differentiable and _tracks_grad(a, *args, *kwargs.values()))

    return rule


register_meta_rule(torch.cov, torch.Tensor.cov)(_covariance_rule(torch.cov))
register_meta_rule(torch.corrcoef, torch.Tensor.corrcoef)(_covariance_rule(torch.corrcoef))
