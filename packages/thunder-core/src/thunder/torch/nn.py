"""Neural-network operations: linear, matmul, embedding, norms, softmax, attention, dropout, losses."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunder import clang
from thunder.clang import TypePromotionKind as TPK
from thunder.core import dtypes, prims
from thunder.core.checks import canonicalize_dim, check
from thunder.core.proxies import TensorProxy
from thunder.torch import elementwise as ew
from thunder.torch import reductions as red
from thunder.torch.registry import InplaceOp, register_torch_alias, torchsymbol

T = torch.Tensor


@torchsymbol(F.linear)
def linear(a, w, bias=None):
    return prims.linear(a, w, bias)


@torchsymbol(torch.matmul, T.matmul, T.__matmul__, method_name="matmul")
def matmul(a, b):
    return prims.matmul(a, b)


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


@torchsymbol(torch.softmax, T.softmax, F.softmax, method_name="softmax")
def softmax(a, dim, dtype=None, _stacklevel: int = 3):
    comp, res = _softmax_dtype(a, dtype)
    x = clang.maybe_convert_to_dtype(a, comp)
    if x.ndim == 0:
        return clang.maybe_convert_to_dtype(clang.full_like(x, 1.0), res)
    dim = canonicalize_dim(a.ndim, dim)
    shifted = prims.sub(x, clang.expand(clang.amax(x, dim, True), x.shape))
    e = prims.exp(shifted)
    out = prims.div(e, clang.expand(clang.sum(e, dim, True), x.shape))
    return clang.maybe_convert_to_dtype(out, res)


@torchsymbol(torch.log_softmax, T.log_softmax, F.log_softmax, method_name="log_softmax")
def log_softmax(a, dim, dtype=None, _stacklevel: int = 3):
    comp, res = _softmax_dtype(a, dtype)
    x = clang.maybe_convert_to_dtype(a, comp)
    if x.ndim == 0:
        return clang.maybe_convert_to_dtype(clang.full_like(x, 0.0), res)
    dim = canonicalize_dim(a.ndim, dim)
    shifted = prims.sub(x, clang.expand(clang.amax(x, dim, True), x.shape))
    lse = prims.log(clang.sum(prims.exp(shifted), dim, True))
    out = prims.sub(shifted, clang.expand(lse, x.shape))
    return clang.maybe_convert_to_dtype(out, res)


# ---------------------------------------------------------------- norms


def _normalized_dims(a, normalized_shape):
    normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
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
    check(dropout_p == 0.0, "scaled_dot_product_attention with dropout has no decomposition", NotImplementedError)
    L, S, E = q.shape[-2], k.shape[-2], q.shape[-1]
    if enable_gqa and k.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k = _repeat_heads(k, rep)
        v = _repeat_heads(v, rep)
    scale = 1 / math.sqrt(E) if scale is None else scale
    comp = dtypes.float32 if q.dtype in (dtypes.float16, dtypes.bfloat16) else q.dtype
    scores = clang.mul(prims.matmul(q, clang.transpose(k, -2, -1)), scale)
    scores = clang.maybe_convert_to_dtype(scores, comp)
    neg_inf = float("-inf")
    if is_causal:
        check(
            attn_mask is None, "_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True"
        )
        keep = prims.ge(
            prims.broadcast_in_dim(prims.iota(L, start=0, step=1, device=q.device, dtype=dtypes.int64), (L, S), (0,)),
            prims.broadcast_in_dim(prims.iota(S, start=0, step=1, device=q.device, dtype=dtypes.int64), (L, S), (1,)),
        )
        scores = clang.where(keep, scores, neg_inf)
    if attn_mask is not None:
        if attn_mask.dtype is dtypes.bool8:
            scores = clang.where(attn_mask, scores, neg_inf)
        else:
            scores = clang.add(scores, attn_mask)
    probs = clang.maybe_convert_to_dtype(softmax(scores, -1), q.dtype)
    return prims.matmul(probs, v)


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


_ = TPK
