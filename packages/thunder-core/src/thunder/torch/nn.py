"""Neural-network operations: linear, matmul, embedding, norms, softmax, attention, dropout, losses."""

from __future__ import annotations

import builtins
import math

import torch
import torch.nn.functional as F

from thunder import clang
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim, check
from thunder.core.proxies import TensorProxy
from thunder.core.symbolic import is_data_dependent, known
from thunder.torch import elementwise as ew
from thunder.torch import reductions as red
from thunder.torch.registry import InplaceOp, register_torch_alias, torchsymbol

T = torch.Tensor


@torchsymbol(F.linear)
def linear(a, w, bias=None):
    return prims.linear(a, w, bias)


@torchsymbol(torch.matmul, T.matmul, T.__matmul__, method_name="matmul")
def matmul(a, b):
    if a.dtype is not b.dtype and _batched_product_of_nothing(a, b):
        # eager's batched path (bmm) returns at once, without its dtype check, when the product has no elements or
        # no terms, and gives b's dtype: then so do we (its values and gradients are zeros or empty)
        a = clang.maybe_convert_to_dtype(a, b.dtype)
    _require_inner_sizes_equal(a, b)
    return prims.matmul(a, b)


def _require_inner_sizes_equal(a, b) -> None:
    """An inner size of the product known only when the program runs (unique's, nonzero's) against a number: the
    program checks then that they are equal, as eager does, and the trace relies on it."""
    if a.ndim == 0 or b.ndim == 0:
        return
    from thunder.torch.indexing import _require_size_at_least

    k, n = a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0]
    for x, y in ((k, n), (n, k)):
        if is_data_dependent(x) and type(y) is int:
            message = f"size mismatch in matmul: inner sizes {{size}} and {y}"
            _require_size_at_least(x, y, RuntimeError, message, below=y + 1)


def _batched_product_of_nothing(a, b) -> bool:
    """Whether eager's ``torch.matmul(a, b)`` runs as a ``bmm`` (``b`` at least 3-D, ``a`` too or a matrix not
    requiring grad, which eager does not fold into an ``mm`` then; a batch times a vector or matrix: see
    ``thunder.tracing.matmul_paths``) of an empty product (a size 0 in either: the batch, the rows, the
    columns or the inner dimension). Sizes not known while tracing: False."""
    if b.ndim < 3 or a.ndim < 2 or (a.ndim == 2 and a.requires_grad):
        return False  # (a matrix requiring grad: eager folds the batch into an mm, which checks the dtypes)
    sizes = (*a.shape, *b.shape)
    return all(type(n) is int for n in sizes) and 0 in sizes


register_torch_alias(T.__rmatmul__, lambda a, b: matmul(b, a))


@torchsymbol(torch.mm, T.mm, method_name="mm")
def mm(a, b):
    check(a.ndim == 2 and b.ndim == 2, "mm: both arguments must be matrices")
    return prims.matmul(a, b)


@torchsymbol(torch.bmm, T.bmm, method_name="bmm")
def bmm(a, b):
    check(a.ndim == 3 and b.ndim == 3, "batch1 and batch2 must be 3D tensors")
    return prims.matmul(a, b)


@torchsymbol(torch.outer, T.outer, method_name="outer")
def outer(a, b):
    return clang.mul(clang.unsqueeze(a, 1), clang.unsqueeze(b, 0))


@torchsymbol(torch.addmm, T.addmm, method_name="addmm")
def addmm(a, m1, m2, *, beta=1, alpha=1):
    prod = prims.matmul(m1, m2)
    return clang.add(clang.mul(a, beta) if beta != 1 else a, clang.mul(prod, alpha) if alpha != 1 else prod)


@torchsymbol(torch.baddbmm, T.baddbmm, method_name="baddbmm")
def baddbmm(a, b1, b2, *, beta=1, alpha=1):
    prod = prims.matmul(b1, b2)
    return clang.add(clang.mul(a, beta) if beta != 1 else a, clang.mul(prod, alpha) if alpha != 1 else prod)


@torchsymbol(torch.addbmm, T.addbmm, method_name="addbmm")
def addbmm(a, b1, b2, *, beta=1, alpha=1):
    check(b1.ndim == 3 and b2.ndim == 3, "batch1 and batch2 must be 3D tensors")
    prod = clang.sum(prims.matmul(b1, b2), 0)
    prod = clang.mul(prod, alpha) if alpha != 1 else prod
    if beta == 0:  # as in eager, the input is then ignored (its NaNs and infinities too)
        return clang.expand(prod, clang.compute_broadcast_shape(a.shape, prod.shape))
    return clang.add(clang.mul(a, beta) if beta != 1 else a, prod)


register_torch_alias(T.addbmm_, InplaceOp(addbmm))


@torchsymbol(F.embedding)
def embedding(a, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    check(
        max_norm is None, "embedding with max_norm (an in-place renormalisation) is not supported", NotImplementedError
    )
    return prims.embedding(a, weight, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse)


# ---------------------------------------------------------------- softmax


def _softmax_dtype(a, dtype):
    res = dtypes.to_dtype(dtype) if dtype is not None else a.dtype
    comp = dtypes.float32 if res in (dtypes.float16, dtypes.bfloat16) else res
    return comp, res


def _without_kernel(a, res):
    """Eager's result where the softmax's dtype (the input's or ``dtype``) is not a real floating-point one: a new
    empty tensor of that dtype for an empty input (its kernel never runs). Eager refuses a non-empty one (for a CPU
    tensor that error is raised where the call is traced: ``thunder/tracing/dtype_support.py``; elsewhere eager's own
    call runs, the opaque fallback). None where the dtype has the kernel."""
    if dtypes.is_float_dtype(res):
        return None
    if any(known(s == 0) for s in a.shape):
        return clang.full(a.shape, 0, device=a.device, dtype=res)
    raise NotImplementedError(f"softmax of {res}: eager's own call")


@torchsymbol(torch.softmax, T.softmax, method_name="softmax")
def softmax(a, dim, dtype=None, _stacklevel: int = 3):
    comp, res = _softmax_dtype(a, dtype)
    empty = _without_kernel(a, res)
    if empty is not None:
        return empty
    x = clang.maybe_convert_to_dtype(a, comp)
    if x.ndim == 0:
        return clang.maybe_convert_to_dtype(clang.full_like(x, 1.0), res)
    dim = canonicalize_dim(a.ndim, dim)
    shifted = prims.sub(x, clang.expand(clang.amax(x, dim, True), x.shape))
    e = prims.exp(shifted)
    out = prims.div(e, clang.expand(clang.sum(e, dim, True), x.shape))
    return clang.maybe_convert_to_dtype(out, res)


@torchsymbol(torch.log_softmax, T.log_softmax, method_name="log_softmax")
def log_softmax(a, dim, dtype=None, _stacklevel: int = 3):
    comp, res = _softmax_dtype(a, dtype)
    empty = _without_kernel(a, res)
    if empty is not None:
        return empty
    x = clang.maybe_convert_to_dtype(a, comp)
    if x.ndim == 0:
        return clang.maybe_convert_to_dtype(clang.full_like(x, 0.0), res)
    dim = canonicalize_dim(a.ndim, dim)
    shifted = prims.sub(x, clang.expand(clang.amax(x, dim, True), x.shape))
    lse = prims.log(clang.sum(prims.exp(shifted), dim, True))
    out = prims.sub(shifted, clang.expand(lse, x.shape))
    return clang.maybe_convert_to_dtype(out, res)


# F.softmax(input, dim, _stacklevel, dtype) orders its arguments differently from torch.softmax
register_torch_alias(F.softmax, lambda a, dim=None, _stacklevel=3, dtype=None: softmax(a, dim, dtype))
register_torch_alias(F.log_softmax, lambda a, dim=None, _stacklevel=3, dtype=None: log_softmax(a, dim, dtype))
register_torch_alias(torch.special.softmax, softmax)
register_torch_alias(torch.special.log_softmax, log_softmax)


# ---------------------------------------------------------------- norms


def _normalized_dims(a, normalized_shape):
    normalized_shape = (
        (normalized_shape,) if isinstance(normalized_shape, (int, torch.SymInt)) else tuple(normalized_shape)
    )
    n = len(normalized_shape)
    check(
        a.shape[a.ndim - n :] == normalized_shape,
        lambda: (
            f"Given normalized_shape={list(normalized_shape)}, expected input with shape [*, "
            f"{', '.join(str(s) for s in normalized_shape)}], but got input of size{list(a.shape)}"
        ),
    )
    return tuple(range(a.ndim - n, a.ndim))


@torchsymbol(F.layer_norm)
def layer_norm(a, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    dims = _normalized_dims(a, normalized_shape)
    comp = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
    x = clang.maybe_convert_to_dtype(a, comp)
    var = clang.var(x, dims, correction=0, keepdim=True)
    mean = clang.mean(x, dims, keepdim=True)
    rstd = prims.rsqrt(prims.add(var, eps))
    out = prims.mul(prims.sub(x, clang.expand(mean, x.shape)), clang.expand(rstd, x.shape))
    if weight is not None:
        out = clang.mul(out, weight)
    if bias is not None:
        out = clang.add(out, bias)
    return clang.maybe_convert_to_dtype(out, a.dtype)


@torchsymbol(F.rms_norm)
def rms_norm(a, normalized_shape, weight=None, eps=None):
    dims = _normalized_dims(a, normalized_shape)
    comp = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
    if eps is None:
        eps = torch.finfo(a.dtype.torch_dtype).eps
    x = clang.maybe_convert_to_dtype(a, comp)
    ms = clang.mean(prims.mul(x, x), dims, keepdim=True)
    out = prims.mul(x, clang.expand(prims.rsqrt(prims.add(ms, eps)), x.shape))
    if weight is not None:
        out = clang.mul(out, weight)
    return clang.maybe_convert_to_dtype(out, a.dtype)


@torchsymbol(name="batch_norm_functional")
def batch_norm_functional(a, running_mean, running_var, weight, bias, training: bool, momentum: float, eps: float):
    """Batch norm without side effects: returns ``(output, new_running_mean, new_running_var)``."""
    check(a.ndim >= 2, lambda: f"batch_norm expects an input with at least 2 dims, got {a.ndim}")
    reduce_dims = (0,) + tuple(range(2, a.ndim))
    comp = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
    x = clang.maybe_convert_to_dtype(a, comp)
    param_shape = [1] * a.ndim
    param_shape[1] = a.shape[1]

    def as_param(t):
        return clang.reshape(clang.maybe_convert_to_dtype(t, comp), param_shape)

    new_mean = new_var = None
    if training:
        var = clang.var(x, reduce_dims, correction=0, keepdim=True)
        mean = clang.mean(x, reduce_dims, keepdim=True)
        if running_mean is not None:
            n = math.prod(a.shape[d] for d in reduce_dims)
            m = clang.reshape(mean, (a.shape[1],))
            unbiased = clang.mul(clang.reshape(var, (a.shape[1],)), n / max(n - 1, 1))
            new_mean = clang.add(
                clang.mul(running_mean, 1 - momentum),
                clang.maybe_convert_to_dtype(clang.mul(m, momentum), running_mean.dtype),
            )
            new_var = clang.add(
                clang.mul(running_var, 1 - momentum),
                clang.maybe_convert_to_dtype(clang.mul(unbiased, momentum), running_var.dtype),
            )
    else:
        mean, var = as_param(running_mean), as_param(running_var)
    out = clang.mul(
        clang.sub(x, mean),
        prims.rsqrt(clang.add(var, eps)) if isinstance(var, TensorProxy) else 1 / math.sqrt(var + eps),
    )
    if weight is not None:
        out = clang.mul(out, as_param(weight))
    if bias is not None:
        out = clang.add(out, as_param(bias))
    for stat in (new_mean, new_var):  # running statistics carry no gradient in eager (the kernel updates them)
        if stat is not None:
            stat.nondifferentiable = True
    return clang.maybe_convert_to_dtype(out, a.dtype), new_mean, new_var


def _batch_norm_adapter(a, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    out, new_mean, new_var = batch_norm_functional(a, running_mean, running_var, weight, bias, training, momentum, eps)
    return out, new_mean, new_var


register_torch_alias(F.batch_norm, InplaceOp(_batch_norm_adapter, mutated_args=(1, 2)))


@torchsymbol(F.group_norm)
def group_norm(a, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    n, c = a.shape[0], a.shape[1]
    check(
        c % num_groups == 0,
        lambda: (
            f"Expected number of channels in input to be divisible by num_groups, but got input of shape {list(a.shape)} and num_groups={num_groups}"
        ),
    )
    comp = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
    x = clang.reshape(clang.maybe_convert_to_dtype(a, comp), (n, num_groups, -1))
    var = clang.var(x, (2,), correction=0, keepdim=True)
    mean = clang.mean(x, (2,), keepdim=True)
    x = clang.mul(clang.sub(x, mean), prims.rsqrt(clang.add(var, eps)))
    out = clang.reshape(x, a.shape)
    pshape = [1] * a.ndim
    pshape[1] = c
    if weight is not None:
        out = clang.mul(out, clang.reshape(weight, pshape))
    if bias is not None:
        out = clang.add(out, clang.reshape(bias, pshape))
    return clang.maybe_convert_to_dtype(out, a.dtype)


@torchsymbol(F.normalize)
def normalize(a, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    check(p == 2.0, "normalize supports p=2 only", NotImplementedError)
    n = red.norm(a, 2, dim, True)
    return clang.true_divide(a, clang.expand(ew.clamp(n, eps), a.shape))


# ---------------------------------------------------------------- attention and dropout


@torchsymbol(F.scaled_dot_product_attention)
def scaled_dot_product_attention(
    q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale=None, enable_gqa: bool = False
):
    return _attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


@torchsymbol()
def scaled_dot_product_attention_math(
    q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False, scale=None, enable_gqa: bool = False
):
    """``F.scaled_dot_product_attention`` where eager runs its math kernel (``torch.nn.attention.sdpa_kernel``, or
    inputs its fused kernels refuse): the same decomposition, which no fused-attention executor claims, so the result
    is laid out as eager's (``tracing/attention_kernels.py``)."""
    return _attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    check(dropout_p == 0.0, "scaled_dot_product_attention with dropout has no decomposition", NotImplementedError)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = _repeat_heads(k, rep)
        v = _repeat_heads(v, rep)
    # as eager's math kernel: float16/bfloat16 computed in float32 and rounded once at the end; the query and the
    # keys each scaled by the root of the scale (its sign on the query) before their product
    out_dtype = q.dtype
    if out_dtype in (dtypes.float16, dtypes.bfloat16):
        q, k, v = (clang.maybe_convert_to_dtype(t, dtypes.float32) for t in (q, k, v))
    # (eager scales by 1/sqrt(E) as a C++ double: with E = 0 the scores are empty sums, zeros, whatever the scale)
    scale = (1 / math.sqrt(E) if E != 0 else 1.0) if scale is None else scale
    root = math.sqrt(abs(scale))
    scores = prims.matmul(clang.mul(q, -root if scale < 0 else root), clang.transpose(clang.mul(k, root), -2, -1))
    neg_inf = float("-inf")
    if is_causal:
        check(
            attn_mask is None, "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True"
        )
        attn_mask = prims.ge(
            prims.broadcast_in_dim(prims.iota(L, start=0, step=1, device=q.device, dtype=dtypes.int64), (L, S), (0,)),
            prims.broadcast_in_dim(prims.iota(S, start=0, step=1, device=q.device, dtype=dtypes.int64), (L, S), (1,)),
        )
    if attn_mask is not None:
        if attn_mask.dtype is dtypes.bool8:
            # eager adds a boolean (or causal) mask as 0 / -inf: a masked score that is +inf or NaN becomes NaN
            scores = clang.where(attn_mask, scores, clang.add(scores, neg_inf))
        else:
            scores = clang.add(scores, attn_mask)
    if S == 0:  # (no key: nothing to attend to, an empty softmax)
        return clang.maybe_convert_to_dtype(prims.matmul(softmax(scores, -1), v), out_dtype)
    # eager's safe softmax: a query whose scores are all -inf attends to nothing, zeros (and zero gradients); softmax
    # over a row of zeros in its place keeps NaN out of the backward too
    masked = prims.eq(clang.amax(scores, -1, True), neg_inf)
    probs = softmax(clang.where(masked, clang.maybe_convert_to_dtype(0, scores.dtype), scores), -1)
    probs = clang.where(masked, clang.maybe_convert_to_dtype(0, probs.dtype), probs)
    return clang.maybe_convert_to_dtype(prims.matmul(probs, v), out_dtype)


def _repeat_heads(t, rep):
    shape = t.shape
    x = clang.unsqueeze(t, -3)
    x = clang.expand(x, shape[:-3] + (shape[-3], rep) + shape[-2:])
    return clang.reshape(x, shape[:-3] + (shape[-3] * rep,) + shape[-2:])


@torchsymbol(F.dropout, tags=("random",))
def dropout(a, p: float = 0.5, training: bool = True, inplace: bool = False):
    check(0.0 <= p <= 1.0, lambda: f"dropout probability has to be between 0 and 1, but got {p}", ValueError)
    if not training or p == 0.0:
        return a
    if p == 1.0:
        return clang.full_like(a, 0)
    u = prims.uniform(a.shape, 0.0, 1.0, device=a.device, dtype=dtypes.float32)
    keep = prims.ge(u, p)
    return clang.where(keep, clang.mul(a, 1 / (1 - p)), clang.maybe_convert_to_dtype(0, a.dtype))


# ---------------------------------------------------------------- losses


@torchsymbol(F.cross_entropy)
def cross_entropy(
    a,
    target,
    weight=None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
):
    check(weight is None, "cross_entropy with class weights has no decomposition yet", NotImplementedError)
    check(size_average is None and reduce is None, "size_average and reduce are deprecated", NotImplementedError)
    check(reduction in ("mean", "sum", "none"), lambda: f"{reduction} is not a valid value for reduction", ValueError)
    class_dim = 0 if a.ndim == 1 else 1
    logp = log_softmax(a, class_dim)
    check(
        dtypes.is_integer_dtype(target.dtype),
        "cross_entropy with probability targets is not supported",
        NotImplementedError,
    )
    valid = prims.ne(target, clang.maybe_convert_to_dtype(ignore_index, target.dtype))
    safe_target = clang.where(valid, target, 0)
    idx = clang.unsqueeze(safe_target, class_dim)
    picked = clang.squeeze(prims.take_along_axis(logp, clang.expand(idx, idx.shape), class_dim), (class_dim,))
    loss = ew.neg(picked)
    if label_smoothing > 0.0:
        n_classes = a.shape[class_dim]
        smooth = ew.neg(clang.sum(logp, class_dim))
        loss = clang.add(clang.mul(loss, 1 - label_smoothing), clang.mul(smooth, label_smoothing / n_classes))
    loss = clang.where(valid, loss, 0.0)
    if reduction == "none":
        return loss
    total = clang.sum(loss)
    if reduction == "sum":
        return total
    count = clang.sum(clang.maybe_convert_to_dtype(valid, a.dtype))
    return clang.true_divide(total, count)


@torchsymbol(F.nll_loss)
def nll_loss(a, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None, reduction: str = "mean"):
    check(weight is None, "nll_loss with class weights has no decomposition yet", NotImplementedError)
    class_dim = 0 if a.ndim == 1 else 1
    valid = prims.ne(target, clang.maybe_convert_to_dtype(ignore_index, target.dtype))
    idx = clang.unsqueeze(clang.where(valid, target, 0), class_dim)
    loss = ew.neg(clang.squeeze(prims.take_along_axis(a, idx, class_dim), (class_dim,)))
    loss = clang.where(valid, loss, 0.0)
    if reduction == "none":
        return loss
    total = clang.sum(loss)
    if reduction == "sum":
        return total
    return clang.true_divide(total, clang.sum(clang.maybe_convert_to_dtype(valid, a.dtype)))


def _reduce(loss, reduction):
    check(reduction in ("mean", "sum", "none"), lambda: f"{reduction} is not a valid value for reduction", ValueError)
    if reduction == "none":
        return loss
    return clang.sum(loss) if reduction == "sum" else clang.mean(loss)


@torchsymbol(F.mse_loss)
def mse_loss(a, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    d = clang.sub(a, target)
    return _reduce(clang.mul(d, d), reduction)


@torchsymbol(F.l1_loss)
def l1_loss(a, target, size_average=None, reduce=None, reduction: str = "mean"):
    return _reduce(ew.abs(clang.sub(a, target)), reduction)


@torchsymbol(F.pad)
def pad(a, pad, mode: str = "constant", value=None):
    check(mode == "constant", "only constant padding has a decomposition", NotImplementedError)
    check(len(pad) % 2 == 0, "Padding length must be divisible by 2")
    check(len(pad) // 2 <= a.ndim, "Padding length should be less than or equal to two times the input dimension")
    config = [(0, 0, 0)] * a.ndim
    for i in range(len(pad) // 2):
        d = a.ndim - 1 - i
        config[d] = (pad[2 * i], pad[2 * i + 1], 0)
    value = 0 if value is None else value
    return prims.pad(a, clang.maybe_convert_to_dtype(value, a.dtype), config)


@torchsymbol(F.one_hot)
def one_hot(a, num_classes: int = -1):
    check(
        num_classes >= 0,
        "one_hot needs num_classes when traced (it would otherwise depend on the data)",
        NotImplementedError,
    )
    classes = prims.iota(num_classes, start=0, step=1, device=a.device, dtype=dtypes.int64)
    out = prims.eq(
        clang.expand(clang.unsqueeze(a, -1), a.shape + (num_classes,)), clang.expand(classes, a.shape + (num_classes,))
    )
    return clang.maybe_convert_to_dtype(out, dtypes.int64)


@torchsymbol(F.cosine_similarity)
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    num = clang.sum(clang.mul(x1, x2), dim)
    n1 = red.norm(x1, 2, dim)
    n2 = red.norm(x2, 2, dim)
    return clang.true_divide(num, ew.clamp(clang.mul(n1, n2), eps))


# ---------------------------------------------------------------- more losses


@torchsymbol(F.smooth_l1_loss)
def smooth_l1_loss(a, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    d = ew.abs(clang.sub(a, target))
    if beta == 0.0:
        return _reduce(d, reduction)
    loss = clang.where(
        ew.lt(d, beta), clang.true_divide(clang.mul(clang.mul(d, d), 0.5), beta), clang.sub(d, 0.5 * beta)
    )
    return _reduce(loss, reduction)


@torchsymbol(F.huber_loss)
def huber_loss(a, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    check(weight is None, "huber_loss with weight has no decomposition", NotImplementedError)
    d = ew.abs(clang.sub(a, target))
    loss = clang.where(ew.lt(d, delta), clang.mul(clang.mul(d, d), 0.5), clang.mul(clang.sub(d, 0.5 * delta), delta))
    return _reduce(loss, reduction)


@torchsymbol(F.binary_cross_entropy)
def binary_cross_entropy(a, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    check(
        a.shape == target.shape,
        lambda: (
            f"Using a target size ({list(target.shape)}) that is different to the input size ({list(a.shape)}) is "
            "deprecated. Please ensure they have the same size."
        ),
        ValueError,
    )
    log_p = ew.clamp(ew.log(a), -100.0, None)
    log_1mp = ew.clamp(ew.log(clang.sub(1, a)), -100.0, None)
    loss = ew.neg(clang.add(clang.mul(target, log_p), clang.mul(clang.sub(1, target), log_1mp)))
    if weight is not None:
        loss = clang.mul(loss, weight)
    return _reduce(loss, reduction)


@torchsymbol(F.binary_cross_entropy_with_logits)
def binary_cross_entropy_with_logits(
    a, target, weight=None, size_average=None, reduce=None, reduction: str = "mean", pos_weight=None
):
    check(
        a.shape == target.shape,
        lambda: f"Target size ({list(target.shape)}) must be the same as input size ({list(a.shape)})",
        ValueError,
    )
    log_sig = ew.logsigmoid(a)
    log_1m_sig = ew.logsigmoid(ew.neg(a))
    if pos_weight is not None:
        loss = ew.neg(
            clang.add(clang.mul(clang.mul(pos_weight, target), log_sig), clang.mul(clang.sub(1, target), log_1m_sig))
        )
    else:
        loss = ew.neg(clang.add(clang.mul(target, log_sig), clang.mul(clang.sub(1, target), log_1m_sig)))
    if weight is not None:
        loss = clang.mul(loss, weight)
    return _reduce(loss, reduction)


@torchsymbol(F.kl_div)
def kl_div(a, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    if log_target:
        loss = clang.mul(ew.exp(target), clang.sub(target, a))
    else:
        loss = clang.sub(ew.xlogy(target, target), clang.mul(target, a))
    if reduction == "batchmean":
        return clang.true_divide(clang.sum(loss), a.shape[0] if a.ndim else 1)
    return _reduce(loss, reduction)


def _clamped_keeping_gradient(var, eps: float):
    """``var`` clamped below at ``eps`` where the gradient passes through unchanged, as eager's
    ``var.clone()`` then ``var.clamp_(min=eps)`` under ``no_grad``. ``var - detach(var)`` is exactly 0 for a
    finite ``var``, so the value is exactly the clamped one; infinities and NaNs pass through as they are."""
    from thunder.torch.shape import detach

    clamped = ew.clamp(var, eps)
    straight_through = clang.add(clang.sub(var, detach(var)), detach(clamped))
    return clang.where(ew.isfinite(var), straight_through, var)


@torchsymbol(F.gaussian_nll_loss)
def gaussian_nll_loss(a, target, var, full: bool = False, eps: float = 1e-6, reduction: str = "mean"):
    """Gaussian negative log-likelihood, with eager's argument checks.

    Eager raises ``ValueError`` when a tensor ``var`` has a negative entry, which needs the tensor's values. The
    torch executor runs ``F.gaussian_nll_loss`` itself, so the program raises eager's error when it runs; an
    executor that runs this decomposition gives NaN wherever ``var`` is negative instead (never a finite wrong
    value)."""
    if not isinstance(var, TensorProxy):
        check(
            isinstance(var, float),
            lambda: f"gaussian_nll_loss(): var must be a tensor or a float, not {var!r}",
            TypeError,
        )
        check(var >= 0, "var has negative entry/entries", ValueError)
        var = clang.full_like(a, var)
    if var.shape != a.shape:
        if a.shape[:-1] == var.shape:  # homoscedastic: one variance per row, broadcast over the last dimension
            var = clang.unsqueeze(var, -1)
        elif not (a.ndim == var.ndim and builtins.sum(y for x, y in zip(a.shape, var.shape) if x != y) == 1):
            check(False, "var is of incorrect size", ValueError)
    check(reduction in ("none", "mean", "sum"), lambda: f"{reduction} is not valid", ValueError)
    negative = ew.lt(var, 0)
    var = clang.where(negative, float("nan"), _clamped_keeping_gradient(var, eps))
    d = clang.sub(a, target)
    loss = clang.mul(clang.add(ew.log(var), clang.true_divide(clang.mul(d, d), var)), 0.5)
    if full:
        loss = clang.add(loss, 0.5 * math.log(2 * math.pi))
    return _reduce(loss, reduction)


# ---------------------------------------------------------------- linear algebra


@torchsymbol(torch.einsum, tags=("alias",))  # eager returns a view for a pure permutation
def einsum(equation: str, *operands):
    """Decomposes to broadcast multiplication and sums (a fusion executor fuses them; torch runs torch.einsum)."""
    if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    specs = lhs.split(",")
    check(len(specs) == len(operands), "einsum(): more operands were provided than specified in the equation")
    free = [chr(c) for c in range(ord("A"), ord("Z") + 1) if chr(c) not in eq]
    n_ell = 0
    expanded = []
    for spec, op in zip(specs, operands):
        if "..." in spec:
            k = op.ndim - (len(spec) - 3)
            n_ell = max(n_ell, k)
            spec = spec.replace("...", "".join(free[n_ell - k : n_ell]) if k else "")
        check(
            len(spec) == op.ndim,
            lambda: (
                f"einsum(): the number of subscripts in the equation ({len(spec)}) does not match the number of dimensions ({op.ndim}) for operand"
            ),
        )
        expanded.append(spec)
    ell = "".join(free[:n_ell])
    if arrow:
        out = rhs.replace("...", ell)
    else:
        counts = {}
        for spec in expanded:
            for ch in spec:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(ch for ch, n in counts.items() if n == 1 and ch not in ell))
    letters = list(out) + sorted({ch for spec in expanded for ch in spec} - set(out))
    sizes = {}
    aligned = []
    for spec, op in zip(expanded, operands):
        # repeated subscripts within one operand (a diagonal) are not decomposed
        check(len(set(spec)) == len(spec), "einsum with a repeated subscript in one operand", NotImplementedError)
        perm = sorted(range(len(spec)), key=lambda i: letters.index(spec[i]))
        x = clang.permute(op, perm) if op.ndim > 1 else op
        ordered = [spec[i] for i in perm]
        shape, bdims = [], []
        for j, ch in enumerate(letters):
            if ch in ordered:
                n = op.shape[spec.index(ch)]
                shape.append(n)
                bdims.append(j)
                if n != 1:
                    sizes[ch] = n
            else:
                shape.append(1)
        aligned.append(prims.broadcast_in_dim(x, tuple(shape), tuple(bdims)))
    result = aligned[0]
    for x in aligned[1:]:
        result = clang.mul(result, x)
    if len(aligned) == 1:
        target = [sizes.get(ch, 1) for ch in letters]
        result = clang.expand(result, target) if tuple(target) != result.shape else result
    contracted = tuple(range(len(out), len(letters)))
    if contracted:
        result = clang.sum(result, contracted)
    return result


@torchsymbol(torch.addmv, T.addmv, method_name="addmv")
def addmv(a, mat, vec, *, beta=1, alpha=1):
    prod = prims.matmul(mat, vec)
    return clang.add(clang.mul(a, beta) if beta != 1 else a, clang.mul(prod, alpha) if alpha != 1 else prod)


@torchsymbol(torch.dot, T.dot, method_name="dot")
def dot(a, b):
    check(
        a.ndim == 1 and b.ndim == 1,
        lambda: f"1D tensors expected, but got {a.ndim}D and {b.ndim}D tensors",
        RuntimeError,
    )
    return prims.matmul(a, b)


# ---------------------------------------------------------------- convolution and pooling


def _ntuple(x, n: int) -> tuple:
    if isinstance(x, (tuple, list)):
        x = tuple(x)
        return x * n if len(x) == 1 else x
    return (x,) * n


def _conv(a, weight, bias, stride, padding, dilation, groups, n: int):
    unbatched = a.ndim == n + 1
    if unbatched:
        a = clang.unsqueeze(a, 0)
    stride, dilation = _ntuple(stride, n), _ntuple(dilation, n)
    if isinstance(padding, str):
        check(padding in ("same", "valid"), lambda: f"Invalid padding string '{padding}'", ValueError)
        if padding == "valid":
            padding = (0,) * n
        else:
            check(all(s == 1 for s in stride), "padding='same' is not supported for strided convolutions", RuntimeError)
            total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
            if any(t % 2 for t in total):
                config = [(0, 0, 0), (0, 0, 0)] + [(t // 2, t - t // 2, 0) for t in total]
                a = prims.pad(a, clang.maybe_convert_to_dtype(0, a.dtype), config)
                padding = (0,) * n
            else:
                padding = tuple(t // 2 for t in total)
    else:
        padding = _ntuple(padding, n)
    out = prims.convolution(a, weight, bias, stride, padding, dilation, False, (0,) * n, groups)
    return clang.squeeze(out, (0,)) if unbatched else out


@torchsymbol(F.conv1d, torch.conv1d)
def conv1d(a, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv(a, weight, bias, stride, padding, dilation, groups, 1)


@torchsymbol(F.conv2d, torch.conv2d)
def conv2d(a, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv(a, weight, bias, stride, padding, dilation, groups, 2)


@torchsymbol(F.conv3d, torch.conv3d)
def conv3d(a, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    return _conv(a, weight, bias, stride, padding, dilation, groups, 3)


def _pool_windows(a, n: int, kernel, stride, padding, dilation, ceil_mode, pad_value):
    """``a`` padded and unfolded into windows: shape ``(*batch, *out_spatial, *kernel)``."""
    kernel = _ntuple(kernel, n)
    stride = _ntuple(stride if stride is not None and stride != [] and stride != () else kernel, n)
    padding, dilation = _ntuple(padding, n), _ntuple(dilation, n)
    nb = a.ndim - n
    config = [(0, 0, 0)] * nb
    outs = []
    for i in range(n):
        size, k, s, p, d = a.shape[nb + i], kernel[i], stride[i], padding[i], dilation[i]
        check(p <= k // 2, "pad should be at most half of effective kernel size", RuntimeError)
        eff = d * (k - 1) + 1
        num = size + 2 * p - eff
        out = (num + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1
        check(out > 0, lambda: f"Given input size too small: output size {out}", RuntimeError)
        extra = max((out - 1) * s + eff - (size + 2 * p), 0)
        config.append((p, p + extra, 0))
        outs.append(out)
    x = prims.pad(a, clang.maybe_convert_to_dtype(pad_value, a.dtype), config)
    for i in range(n):
        k, s, d = kernel[i], stride[i], dilation[i]
        eff = d * (k - 1) + 1
        x = prims.unfold(x, nb + i, eff, s)
        x = clang.slice_in_dim(x, 0, outs[i], 1, nb + i)
        if d > 1:
            x = clang.slice_in_dim(x, 0, eff, d, x.ndim - 1)
    return x, kernel, stride, padding, outs


def _max_pool(a, n, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    check(not return_indices, "max pooling with return_indices has no decomposition", NotImplementedError)
    check(a.ndim in (n + 1, n + 2), lambda: f"max_pool{n}d: expected {n + 1}D or {n + 2}D input, got {a.ndim}D")
    low = float("-inf") if dtypes.is_float_dtype(a.dtype) else torch.iinfo(a.dtype.torch_dtype).min
    x, *_ = _pool_windows(a, n, kernel_size, stride, padding, dilation, ceil_mode, low)
    return clang.amax(x, tuple(range(x.ndim - n, x.ndim)))


@torchsymbol(F.max_pool1d, torch.max_pool1d)
def max_pool1d(
    a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False
):
    return _max_pool(a, 1, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@torchsymbol(F.max_pool2d, torch.max_pool2d)
def max_pool2d(
    a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False
):
    return _max_pool(a, 2, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@torchsymbol(F.max_pool3d, torch.max_pool3d)
def max_pool3d(
    a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False, return_indices: bool = False
):
    return _max_pool(a, 3, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _avg_pool(a, n, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    check(a.ndim in (n + 1, n + 2), lambda: f"avg_pool{n}d: expected {n + 1}D or {n + 2}D input, got {a.ndim}D")
    x, kernel, stride_t, padding_t, outs = _pool_windows(a, n, kernel_size, stride, padding, 1, ceil_mode, 0)
    window_dims = tuple(range(x.ndim - n, x.ndim))
    total = clang.sum(x, window_dims)
    if divisor_override:
        return (
            clang.true_divide(total, divisor_override)
            if dtypes.is_float_dtype(a.dtype)
            else ew.floor_divide(total, divisor_override)
        )
    # the divisor counts the window's elements inside the (padded, if count_include_pad) input
    nb = a.ndim - n
    counts = None
    for i in range(n):
        size, k, s, p = a.shape[nb + i], kernel[i], stride_t[i], padding_t[i]
        hi_limit = size + p if count_include_pad else size
        lo_limit = -p if count_include_pad else 0
        c = []
        for o in range(outs[i]):
            start = o * s - p
            end = min(start + k, size + p)
            c.append(min(end, hi_limit) - max(start, lo_limit))
        shape = [1] * total.ndim
        shape[nb + i] = outs[i]
        ct = clang.reshape(_tensor_of(c, a), shape)
        counts = ct if counts is None else clang.mul(counts, ct)
    return clang.maybe_convert_to_dtype(clang.true_divide(total, counts), a.dtype)


def _tensor_of(values, like):
    parts = [prims.full((1,), float(v), device=like.device, dtype=dtypes.float32) for v in values]
    return parts[0] if len(parts) == 1 else prims.cat(parts, 0)


@torchsymbol(F.avg_pool1d, torch.avg_pool1d)
def avg_pool1d(a, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
    return _avg_pool(a, 1, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@torchsymbol(F.avg_pool2d)
def avg_pool2d(
    a,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
):
    return _avg_pool(a, 2, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@torchsymbol(F.avg_pool3d)
def avg_pool3d(
    a,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override=None,
):
    return _avg_pool(a, 3, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _adaptive_pool(a, n, output_size, reduce):
    output_size = _ntuple(output_size, n)
    nb = a.ndim - n
    x = a
    for i in range(n):
        d = nb + i
        size = a.shape[d]
        out = size if output_size[i] is None else output_size[i]
        if size % out == 0:
            k = size // out
            shape = x.shape[:d] + (out, k) + x.shape[d + 1 :]
            x = reduce(clang.reshape(x, shape), (d + 1,))
            continue
        parts = []
        for o in range(out):
            start, end = (o * size) // out, -((-(o + 1) * size) // out)
            parts.append(reduce(clang.slice_in_dim(x, start, end, 1, d), (d,), keepdim=True))
        x = clang.cat(parts, d)
    return x


def _mean_dims(x, dims, keepdim=False):
    return clang.maybe_convert_to_dtype(clang.mean(x, dims, keepdim), x.dtype)


def _max_dims(x, dims, keepdim=False):
    return clang.amax(x, dims, keepdim)


@torchsymbol(F.adaptive_avg_pool1d, torch.adaptive_avg_pool1d)
def adaptive_avg_pool1d(a, output_size):
    return _adaptive_pool(a, 1, output_size, _mean_dims)


@torchsymbol(F.adaptive_avg_pool2d)
def adaptive_avg_pool2d(a, output_size):
    return _adaptive_pool(a, 2, output_size, _mean_dims)


@torchsymbol(F.adaptive_avg_pool3d)
def adaptive_avg_pool3d(a, output_size):
    return _adaptive_pool(a, 3, output_size, _mean_dims)


@torchsymbol(F.adaptive_max_pool1d)
def adaptive_max_pool1d(a, output_size, return_indices: bool = False):
    check(not return_indices, "adaptive max pooling with return_indices has no decomposition", NotImplementedError)
    return _adaptive_pool(a, 1, output_size, _max_dims)


@torchsymbol(F.adaptive_max_pool2d)
def adaptive_max_pool2d(a, output_size, return_indices: bool = False):
    check(not return_indices, "adaptive max pooling with return_indices has no decomposition", NotImplementedError)
    return _adaptive_pool(a, 2, output_size, _max_dims)


# ---------------------------------------------------------------- interpolation


@torchsymbol(F.interpolate)
def interpolate(
    a,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners=None,
    recompute_scale_factor=None,
    antialias: bool = False,
):
    n = a.ndim - 2
    check(n >= 1, "interpolate expects a batched input with at least one spatial dim", ValueError)
    check(not antialias, "interpolate with antialias has no decomposition", NotImplementedError)
    linear = {"linear": 1, "bilinear": 2, "trilinear": 3}
    check(
        mode in ("nearest", "nearest-exact") or mode in linear,
        f"interpolate mode {mode!r} has no decomposition",
        NotImplementedError,
    )
    check((size is None) != (scale_factor is None), "only one of size or scale_factor should be defined", ValueError)
    if size is not None:
        out_sizes = _ntuple(size, n)
        scales = [None] * n
    else:
        factors = _ntuple(scale_factor, n)
        out_sizes = tuple(int(math.floor(s * f)) for s, f in zip(a.shape[2:], factors))
        scales = [None] * n if recompute_scale_factor else list(factors)
    x = a
    comp = dtypes.float32 if a.dtype in (dtypes.float16, dtypes.bfloat16) else a.dtype
    for i in range(n):
        d = 2 + i
        in_size, out_size = a.shape[d], out_sizes[i]
        scale = (1.0 / scales[i]) if scales[i] else in_size / out_size
        pos = prims.iota(out_size, start=0, step=1, device=a.device, dtype=comp)
        if mode in ("nearest", "nearest-exact"):
            if mode == "nearest":
                src = ew.floor(clang.mul(pos, scale))
            else:
                src = ew.floor(clang.mul(clang.add(pos, 0.5), scale))
            idx = ew.clamp(clang.maybe_convert_to_dtype(src, dtypes.int64), None, in_size - 1)
            x = prims.take(x, idx, d)
            continue
        if align_corners:
            s = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
            src = clang.mul(pos, s)
        else:
            src = ew.clamp(clang.sub(clang.mul(clang.add(pos, 0.5), scale), 0.5), 0.0, None)
        i0f = ew.floor(src)
        i0 = ew.clamp(clang.maybe_convert_to_dtype(i0f, dtypes.int64), None, in_size - 1)
        i1 = ew.clamp(clang.add(i0, 1), None, in_size - 1)
        w1 = clang.sub(src, clang.maybe_convert_to_dtype(i0, comp))
        shape = [1] * x.ndim
        shape[d] = out_size
        w1 = clang.maybe_convert_to_dtype(clang.reshape(w1, shape), comp)
        x0 = clang.maybe_convert_to_dtype(prims.take(x, i0, d), comp)
        x1 = clang.maybe_convert_to_dtype(prims.take(x, i1, d), comp)
        x = clang.add(x0, clang.mul(clang.sub(x1, x0), w1))
    return clang.maybe_convert_to_dtype(x, a.dtype)
