"""Primitive operations: a name, an id and a meta function each.

Prims do no broadcasting and no type promotion (the core language does); their meta functions
check their inputs and compute output metadata. Executors implement prims; grad rules are
registered on them from outside (``thunder.transforms``).
"""

from __future__ import annotations

from enum import Enum
from numbers import Number

from thunder.core import devices, dtypes
from thunder.core.checks import canonicalize_dim, canonicalize_dims, check, check_valid_shape
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.symbolic import may_broadcast

__all__ = ["make_prim", "OpTags", "all_prims"]


class OpTags(str, Enum):
    ELEMENTWISE = "elementwise"
    REDUCTION = "reduction"
    SHAPE_OP = "shape_op"
    RANDOM = "random"
    MATMUL = "matmul"
    IN_PLACE = "in_place"
    DONT_DCE = "dont_dce"


all_prims: dict[str, Symbol] = {}


def make_prim(name: str, meta, *, tags=()) -> Symbol:
    """Creates and registers the primitive ``prims.<name>``."""
    sym = Symbol(
        name,
        meta,
        id=f"prims.{name}",
        is_prim=True,
        print_name=f"prims.{name}",
        imports=("import thunder.core.prims as prims",),
        tags=tags,
    )
    all_prims[name] = sym
    globals()[name] = sym
    return sym


def _tensors(*args):
    return [a for a in args if isinstance(a, TensorProxy)]


def _check_same(tensors, what: str) -> None:
    if len(tensors) < 2:
        return
    first = tensors[0]
    for t in tensors[1:]:
        check(t.shape == first.shape, lambda: f"{what}: expected the same shape, got {first.shape} and {t.shape}")
        check(t.device is first.device, lambda: f"{what}: expected one device, got {first.device} and {t.device}")
        check(t.dtype is first.dtype, lambda: f"{what}: expected one dtype, got {first.dtype} and {t.dtype}")


# ---------------------------------------------------------------- elementwise


def _unary_meta(output_dtype=None):
    def meta(a):
        check(isinstance(a, (TensorProxy, Number)), lambda: f"expected a tensor or number, got {type(a).__name__}")
        if not isinstance(a, TensorProxy):
            raise TypeError("elementwise prims on Python numbers are folded by the core language")
        return TensorProxy(like=a, dtype=output_dtype)

    return meta


_unary_float = (
    "abs neg exp exp2 expm1 log log1p log2 log10 sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
    "sqrt rsqrt reciprocal erf erfc erfinv lgamma digamma sign floor ceil round trunc bitwise_not"
).split()
_unary_bool = "isfinite isnan isinf signbit".split()

for _n in _unary_float:
    make_prim(_n, _unary_meta(), tags=(OpTags.ELEMENTWISE,))
for _n in _unary_bool:
    make_prim(_n, _unary_meta(dtypes.bool8), tags=(OpTags.ELEMENTWISE,))


def _binary_meta(output_dtype=None):
    def meta(a, b):
        tensors = _tensors(a, b)
        check(bool(tensors), "elementwise binary prims need at least one tensor", TypeError)
        _check_same(tensors, "elementwise binary prim")
        return TensorProxy(like=tensors[0], dtype=output_dtype)

    return meta


_binary_same = (
    "add sub mul div pow maximum minimum fmod remainder atan2 bitwise_and bitwise_or bitwise_xor "
    "shift_left shift_right_arithmetic copysign nextafter floor_divide"
).split()
_binary_bool = "eq ne lt le gt ge".split()
for _n in _binary_same:
    make_prim(_n, _binary_meta(), tags=(OpTags.ELEMENTWISE,))
for _n in _binary_bool:
    make_prim(_n, _binary_meta(dtypes.bool8), tags=(OpTags.ELEMENTWISE,))


def _where_meta(pred, a, b):
    tensors = _tensors(pred, a, b)
    check(bool(tensors), "where needs at least one tensor", TypeError)
    check(
        all(t.shape == tensors[0].shape for t in tensors[1:]),
        lambda: f"where: expected one shape, got {[tuple(t.shape) for t in tensors]}",
    )
    if isinstance(pred, TensorProxy):
        check(pred.dtype is dtypes.bool8, lambda: f"where: the condition must be bool, got {pred.dtype}")
    values = _tensors(a, b)
    if len(values) == 2:
        check(a.dtype is b.dtype, lambda: f"where: expected one dtype, got {a.dtype} and {b.dtype}")
    like = values[0] if values else tensors[0]
    dtype = like.dtype if values else dtypes.to_dtype(type(a))
    return TensorProxy(like=tensors[0], dtype=dtype)


make_prim("where", _where_meta, tags=(OpTags.ELEMENTWISE,))


def _convert_element_type_meta(a, dtype):
    dtype = dtypes.to_dtype(dtype)
    return TensorProxy(like=a, dtype=dtype)


make_prim("convert_element_type", _convert_element_type_meta, tags=(OpTags.ELEMENTWISE,))


# ---------------------------------------------------------------- shape


def _broadcast_in_dim_meta(a, shape, broadcast_dimensions):
    shape = tuple(shape)
    check_valid_shape(shape)
    check(
        len(broadcast_dimensions) == a.ndim,
        lambda: f"broadcast_in_dim: {a.ndim} dims of the input but {len(broadcast_dimensions)} broadcast dimensions",
    )
    for i, d in enumerate(broadcast_dimensions):
        check(
            may_broadcast(a.shape[i], shape[d]),
            lambda: f"broadcast_in_dim: cannot broadcast dim {i} of size {a.shape[i]} to size {shape[d]}",
        )
    return TensorProxy(like=a, shape=shape)


make_prim("broadcast_in_dim", _broadcast_in_dim_meta, tags=(OpTags.SHAPE_OP,))


def _reshape_meta(a, shape):
    shape = tuple(shape)
    check_valid_shape(shape)
    n = 1
    for s in shape:
        n *= s
    check(n == a.numel(), lambda: f"shape '{list(shape)}' is invalid for input of size {a.numel()}")
    return TensorProxy(like=a, shape=shape)


make_prim("reshape", _reshape_meta, tags=(OpTags.SHAPE_OP,))


def _transpose_meta(a, permutation):
    check(
        sorted(permutation) == list(range(a.ndim)),
        lambda: f"transpose: {tuple(permutation)} is not a permutation of the {a.ndim} dims",
    )
    return TensorProxy(like=a, shape=[a.shape[p] for p in permutation])


make_prim("transpose", _transpose_meta, tags=(OpTags.SHAPE_OP,))


def _slice_meta(a, start_indices, end_indices, strides=None):
    strides = strides if strides is not None else [1] * a.ndim
    check(
        len(start_indices) == len(end_indices) == len(strides) == a.ndim,
        "slice: start, end and strides need one entry per dim",
    )
    shape = []
    for s, e, st, n in zip(start_indices, end_indices, strides, a.shape):
        check(0 <= s <= e <= n, lambda: f"slice: bad bounds [{s}, {e}) for a dim of size {n}")
        check(st >= 1, lambda: f"slice: stride {st} must be positive")
        shape.append((e - s + st - 1) // st)
    return TensorProxy(like=a, shape=shape)


make_prim("slice", _slice_meta, tags=(OpTags.SHAPE_OP,))


def _squeeze_meta(a, dims):
    dims = canonicalize_dims(a.ndim, dims)
    for d in dims:
        check(a.shape[d] == 1, lambda: f"squeeze: dim {d} has size {a.shape[d]}, not 1")
    return TensorProxy(like=a, shape=[s for i, s in enumerate(a.shape) if i not in dims])


make_prim("squeeze", _squeeze_meta, tags=(OpTags.SHAPE_OP,))


def _cat_meta(tensors, dim):
    check(len(tensors) > 0, "torch.cat(): expected a non-empty list of Tensors", RuntimeError)
    first = tensors[0]
    dim = canonicalize_dim(first.ndim, dim)
    total = 0
    for i_t, t in enumerate(tensors):
        check(t.ndim == first.ndim, lambda: f"cat: tensors must have the same number of dims, got {t.ndim}")
        check(t.dtype is first.dtype and t.device is first.device, "cat: tensors must share dtype and device")
        for i, (x, y) in enumerate(zip(t.shape, first.shape)):
            check(
                i == dim or x == y,
                lambda: (
                    f"Sizes of tensors must match except in dimension {dim}. Expected size {y} but got "
                    f"size {x} for tensor number {i_t} in the list."
                ),
            )
        total += t.shape[dim]
    shape = list(first.shape)
    shape[dim] = total
    return TensorProxy(like=first, shape=shape)


make_prim("cat", _cat_meta, tags=(OpTags.SHAPE_OP,))


def _pad_meta(a, padding_value, padding_config):
    check(len(padding_config) == a.ndim, "pad: one (low, high, interior) triple per dim")
    shape = []
    for n, (lo, hi, interior) in zip(a.shape, padding_config):
        check(interior >= 0, "pad: interior padding must be non-negative")
        size = n + lo + hi + max(n - 1, 0) * interior
        check(size >= 0, lambda: f"pad: the padded size {size} is negative")
        shape.append(size)
    return TensorProxy(like=a, shape=shape)


make_prim("pad", _pad_meta, tags=(OpTags.SHAPE_OP,))


def _flip_meta(a, dims):
    canonicalize_dims(a.ndim, dims)
    return TensorProxy(like=a)


make_prim("flip", _flip_meta, tags=(OpTags.SHAPE_OP,))


def _stride_order_meta(a, order):
    return TensorProxy(like=a)


make_prim("stride_order", _stride_order_meta, tags=(OpTags.SHAPE_OP,))
make_prim("clone", lambda a: TensorProxy(like=a))


def _take_meta(a, index, dim):
    dim = canonicalize_dim(a.ndim, dim)
    check(dtypes.is_integer_dtype(index.dtype), "take: the index must be an integer tensor", TypeError)
    check(index.ndim <= 1, "take: index_select's index must be 0-d or 1-d", IndexError)
    shape = list(a.shape)
    if a.ndim:
        shape[dim] = index.numel()
    return TensorProxy(like=a, shape=shape)


make_prim("take", _take_meta)


def _take_along_axis_meta(a, index, dim):
    dim = canonicalize_dim(a.ndim, dim)
    check(index.ndim == a.ndim, "Index tensor must have the same number of dimensions as input tensor", RuntimeError)
    check(dtypes.is_integer_dtype(index.dtype), "gather(): Expected dtype int64 for index", RuntimeError)
    return TensorProxy(like=a, shape=index.shape)


make_prim("take_along_axis", _take_along_axis_meta)


def _scatter_add_meta(a, index, value, dim):
    canonicalize_dim(a.ndim, dim)
    return TensorProxy(like=a)


make_prim("scatter_add", _scatter_add_meta)


def _scatter_meta(a, index, src, dim):
    dim = canonicalize_dim(a.ndim, dim)
    check(dtypes.is_integer_dtype(index.dtype), "scatter(): Expected dtype int64 for index", RuntimeError)
    check(
        index.ndim == a.ndim or (index.ndim <= 1 and a.ndim <= 1),
        "Index tensor must have the same number of dimensions as self tensor",
        RuntimeError,
    )
    if isinstance(src, TensorProxy):
        check(src.dtype is a.dtype, lambda: "scatter(): Expected self.dtype to be equal to src.dtype", RuntimeError)
    return TensorProxy(like=a)


make_prim("scatter", _scatter_meta)


def _unfold_meta(a, dim, size, step):
    dim = canonicalize_dim(a.ndim, dim)
    max_size = 1 if a.ndim == 0 else a.shape[dim]
    check(
        size <= max_size,
        lambda: f"maximum size for tensor at dimension {dim} is {max_size} but size is {size}",
        RuntimeError,
    )
    check(size >= 0, lambda: f"size is {size} but must be >= 0", RuntimeError)
    check(step > 0, lambda: f"step is {step} but must be > 0", RuntimeError)
    shape = list(a.shape)
    shape.append(size)
    if a.ndim:
        shape[dim] = (shape[dim] - size) // step + 1
    return TensorProxy(like=a, shape=shape)


make_prim("unfold", _unfold_meta, tags=(OpTags.SHAPE_OP,))


def _convolution_meta(a, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    n_spatial = weight.ndim - 2
    check(
        a.ndim == n_spatial + 2,
        lambda: (
            f"Expected {n_spatial + 1}D (unbatched) or {n_spatial + 2}D (batched) input to conv{n_spatial}d, "
            f"but got input of size: {list(a.shape)}"
        ),
        RuntimeError,
    )
    check(a.dtype is weight.dtype, "Input type and weight type should be the same", RuntimeError)
    check(
        len(stride) == len(padding) == len(dilation) == n_spatial,
        "convolution: stride, padding and dilation need one entry per spatial dim",
    )
    if not transposed:
        check(
            a.shape[1] == weight.shape[1] * groups,
            lambda: (
                f"Given groups={groups}, weight of size {list(weight.shape)}, expected input{list(a.shape)} to have "
                f"{weight.shape[1] * groups} channels, but got {a.shape[1]} channels instead"
            ),
            RuntimeError,
        )
        out_channels = weight.shape[0]
    else:
        check(a.shape[1] == weight.shape[0], "convolution: input channels must match the weight's first dim")
        out_channels = weight.shape[1] * groups
    spatial = []
    for i in range(n_spatial):
        n, k = a.shape[i + 2], weight.shape[i + 2]
        if transposed:
            size = (n - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + output_padding[i] + 1
        else:
            size = (n + 2 * padding[i] - dilation[i] * (k - 1) - 1) // stride[i] + 1
        check(
            size > 0,
            lambda: f"Calculated output size: {size} is too small (input size {n}, kernel size {k} after dilation)",
            RuntimeError,
        )
        spatial.append(size)
    if bias is not None:
        check(bias.ndim == 1 and bias.shape[0] == out_channels, "convolution: bias must be 1-D with out_channels")
    return TensorProxy(like=a, shape=(a.shape[0], out_channels, *spatial))


make_prim("convolution", _convolution_meta, tags=(OpTags.MATMUL,))


def _randint_meta(low, high, shape, *, device, dtype):
    check_valid_shape(shape)
    check(low < high, lambda: f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    return TensorProxy(shape=shape, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


make_prim("randint", _randint_meta, tags=(OpTags.RANDOM,))


def _bernoulli_meta(a):
    return TensorProxy(like=a)


make_prim("bernoulli", _bernoulli_meta, tags=(OpTags.RANDOM,))


def _multinomial_meta(a, num_samples, replacement):
    check(a.ndim in (1, 2), "prob_dist must be 1 or 2 dim", RuntimeError)
    check(num_samples > 0, "cannot sample n_sample <= 0 samples", RuntimeError)
    check(
        replacement or num_samples <= a.shape[-1],
        "cannot sample n_sample > prob_dist.size(-1) samples without replacement",
        RuntimeError,
    )
    return TensorProxy(like=a, shape=a.shape[:-1] + (num_samples,), dtype=dtypes.int64)


make_prim("multinomial", _multinomial_meta, tags=(OpTags.RANDOM,))


def _index_put_meta(a, indices, values, accumulate):
    return TensorProxy(like=a)


make_prim("index_put", _index_put_meta)

# ---------------------------------------------------------------- reductions


def _reduction_meta(output_dtype=None):
    def meta(a, dims):
        dims = canonicalize_dims(a.ndim, dims)
        shape = [s for i, s in enumerate(a.shape) if i not in dims]
        return TensorProxy(like=a, shape=shape, dtype=output_dtype)

    return meta


for _n in ("sum", "prod", "amax", "amin"):
    make_prim(_n, _reduction_meta(), tags=(OpTags.REDUCTION,))


def _var_meta(a, dims, *, correction):
    dims = canonicalize_dims(a.ndim, dims)
    shape = [s for i, s in enumerate(a.shape) if i not in dims]
    return TensorProxy(like=a, shape=shape, dtype=dtypes.corresponding_real_dtype(a.dtype))


make_prim("var", _var_meta, tags=(OpTags.REDUCTION,))


def _arg_reduction_meta(a, dim):
    if dim is None:
        return TensorProxy(like=a, shape=(), dtype=dtypes.int64)
    dim = canonicalize_dim(a.ndim, dim)
    shape = [s for i, s in enumerate(a.shape) if i != dim]
    return TensorProxy(like=a, shape=shape, dtype=dtypes.int64)


make_prim("argmax", _arg_reduction_meta, tags=(OpTags.REDUCTION,))
make_prim("argmin", _arg_reduction_meta, tags=(OpTags.REDUCTION,))


def _cumsum_meta(a, dim):
    canonicalize_dim(a.ndim, dim)
    return TensorProxy(like=a)


make_prim("cumsum", _cumsum_meta)


def _topk_meta(a, k, dim, largest, sorted):
    dim = canonicalize_dim(a.ndim, dim)
    n = a.shape[dim] if a.ndim else 1
    check(0 <= k <= n, "selected index k out of range", RuntimeError)
    shape = list(a.shape)
    if a.ndim:
        shape[dim] = k
    return TensorProxy(like=a, shape=shape), TensorProxy(like=a, shape=shape, dtype=dtypes.int64)


make_prim("topk", _topk_meta)


def _sort_meta(a, dim, descending, stable):
    canonicalize_dim(a.ndim, dim)
    return TensorProxy(like=a), TensorProxy(like=a, dtype=dtypes.int64)


make_prim("sort", _sort_meta)

# ---------------------------------------------------------------- factories


def _full_meta(shape, fill_value, *, device, dtype):
    check_valid_shape(shape)
    return TensorProxy(shape=shape, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


make_prim("full", _full_meta)


def _iota_meta(length, *, start, step, device, dtype):
    check(length >= 0, "iota: negative length")
    return TensorProxy(shape=(length,), device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


make_prim("iota", _iota_meta)


def _uniform_meta(shape, minval, maxval, *, device, dtype):
    check_valid_shape(shape)
    return TensorProxy(shape=shape, device=devices.to_device(device), dtype=dtypes.to_dtype(dtype))


make_prim("uniform", _uniform_meta, tags=(OpTags.RANDOM,))
make_prim(
    "randn", lambda shape, *, device, dtype: _full_meta(shape, 0, device=device, dtype=dtype), tags=(OpTags.RANDOM,)
)


# the global random number generators, changed by the program (torch.manual_seed, set_rng_state inside it):
# run at their place in the program on every call; `device` is "cpu" or "cuda:<i>"
def _rng_seed_meta(seed: int) -> None:
    check(isinstance(seed, int), lambda: f"rng_seed: expected a Python int seed, got {type(seed).__name__}")
    return None


def _rng_get_state_meta(device: str) -> TensorProxy:
    import torch

    # (through the generators: torch.get_rng_state is replaced while tracing)
    if device == "cpu":
        size = torch.default_generator.get_state().numel()
    else:
        size = torch.cuda.default_generators[torch.device(device).index].get_state().numel()
    return TensorProxy(shape=(size,), device=devices.to_device("cpu"), dtype=dtypes.uint8)


def _rng_set_state_meta(state: TensorProxy, device: str) -> None:
    check(
        state.dtype is dtypes.uint8 and state.ndim == 1,
        lambda: f"set_rng_state: expected a 1-d uint8 state tensor, got {state.dtype} of shape {tuple(state.shape)}",
    )
    return None


make_prim("rng_seed", _rng_seed_meta, tags=(OpTags.DONT_DCE, OpTags.RANDOM))
make_prim("rng_get_state", _rng_get_state_meta, tags=(OpTags.DONT_DCE, OpTags.RANDOM))
make_prim("rng_set_state", _rng_set_state_meta, tags=(OpTags.DONT_DCE, OpTags.RANDOM))


def _device_put_meta(a, device):
    return TensorProxy(like=a, device=devices.to_device(device))


make_prim("device_put", _device_put_meta)

# ---------------------------------------------------------------- linear algebra and friends


def _cpp(dtype) -> str:
    return dtypes.cpp_type_name(dtypes.to_torch_dtype(dtype))


def _matmul_dtype_error(a_ndim: int, b_ndim: int, a_dtype, b_dtype) -> str:
    """Eager's message for a matrix product of operands of two dtypes, which names them as the kernel ``matmul``
    dispatches to does (dot, addmv, mm/bmm)."""
    name = dtypes.message_name
    if a_ndim == 1 and b_ndim == 1:
        return f"dot : expected both vectors to have same dtype, but found {name(a_dtype)} and {name(b_dtype)}"
    if b_ndim == 1:
        return (
            f"addmv input tensors must have the same dtype, but got {name(b_dtype)}, {name(a_dtype)}, and "
            f"{name(b_dtype)}"
        )
    if a_ndim == 1 and b_ndim > 2:
        return f"expected scalar type {name(a_dtype)} but found {name(b_dtype)}"
    return f"expected m1 and m2 to have the same dtype, but got: {_cpp(a_dtype)} != {_cpp(b_dtype)}"


def _matmul_meta(a, b):
    check(a.ndim >= 1 and b.ndim >= 1, "both arguments to matmul need to be at least 1D", RuntimeError)
    check(a.dtype is b.dtype, lambda: _matmul_dtype_error(a.ndim, b.ndim, a.dtype, b.dtype))
    check(a.device is b.device, lambda: f"matmul: tensors on different devices {a.device} and {b.device}")
    if a.ndim == 1 and b.ndim == 1:
        check(a.shape[0] == b.shape[0], lambda: f"inconsistent tensor size, {a.shape[0]} vs {b.shape[0]}")
        return TensorProxy(like=a, shape=())
    a_shape = (1,) + a.shape if a.ndim == 1 else a.shape
    b_shape = b.shape + (1,) if b.ndim == 1 else b.shape
    check(
        a_shape[-1] == b_shape[-2],
        lambda: (
            f"mat1 and mat2 shapes cannot be multiplied ({a_shape[-2]}x{a_shape[-1]} and {b_shape[-2]}x{b_shape[-1]})"
        ),
    )
    batch = _broadcast_shapes(a_shape[:-2], b_shape[:-2])
    shape = list(batch) + [a_shape[-2], b_shape[-1]]
    if a.ndim == 1:
        shape.pop(-2)
    if b.ndim == 1:
        shape.pop(-1)
    return TensorProxy(like=a, shape=shape)


def _broadcast_shapes(*shapes):
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, n in enumerate(s):
            j = ndim - len(s) + i
            check(
                out[j] == n or out[j] == 1 or n == 1,
                lambda: f"shapes {[tuple(x) for x in shapes]} cannot be broadcast together",
            )
            if n != 1:
                out[j] = n
    return tuple(out)


make_prim("matmul", _matmul_meta, tags=(OpTags.MATMUL,))


def _linear_meta(a, w, bias):
    # (eager's words: linear runs addmm with a bias, which checks the bias against the weight first)
    if bias is not None and w.ndim == 2:
        name = dtypes.message_name
        check(
            bias.dtype is w.dtype,
            lambda: f"self and mat2 must have the same dtype, but got {name(bias.dtype)} and {name(w.dtype)}",
        )
        check(
            a.dtype is w.dtype,
            lambda: f"mat1 and mat2 must have the same dtype, but got {name(a.dtype)} and {name(w.dtype)}",
        )
    check(a.dtype is w.dtype, lambda: _matmul_dtype_error(a.ndim, w.ndim, a.dtype, w.dtype))
    check(w.ndim in (1, 2), lambda: f"linear: weight must be 1-D or 2-D, got {w.ndim}-D")
    check(
        a.shape[-1] == w.shape[-1],
        lambda: (
            f"mat1 and mat2 shapes cannot be multiplied ({a.numel() // max(a.shape[-1], 1)}x{a.shape[-1]} "
            f"and {w.shape[-1]}x{w.shape[0] if w.ndim == 2 else 1})"
        ),
    )
    shape = a.shape[:-1] + ((w.shape[0],) if w.ndim == 2 else ())
    if bias is not None:
        check(bias.dtype is a.dtype, "linear: bias dtype differs from input dtype")
    return TensorProxy(like=a, shape=shape)


make_prim("linear", _linear_meta, tags=(OpTags.MATMUL,))


def _embedding_meta(
    indices, weight, *, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False
):
    check(dtypes.is_integer_dtype(indices.dtype), "embedding: indices must be an integer tensor", RuntimeError)
    check(weight.ndim == 2, "'weight' must be 2-D", RuntimeError)
    return TensorProxy(like=weight, shape=indices.shape + (weight.shape[1],))


make_prim("embedding", _embedding_meta)


def _copy__meta(src, dst):
    return TensorProxy(like=dst)


make_prim("copy_", _copy__meta, tags=(OpTags.IN_PLACE, OpTags.DONT_DCE))


# Python-level constructs that appear in traces
def _return_printer(bsym, printer):
    return [f"return {printer.value(bsym.args[0])}"]


python_return = Symbol(
    "python_return",
    lambda value: value,
    id="python_return",
    is_prim=True,
    python_printer=_return_printer,
    tags=(OpTags.DONT_DCE,),
)


def _del_printer(bsym, printer):
    return [f"del {', '.join(printer.name(p) for p in bsym.args)}"]


def _size_of_printer(bsym, printer):
    t, dim = bsym.args
    return [f"{printer.name(bsym.output)} = {printer.name(t)}.shape[{dim}]"]


# a size that depends on tensor values (nonzero's, a boolean mask's), read from the tensor once computed
size_of = Symbol("size_of", lambda t, dim: None, id="size_of", is_prim=True, python_printer=_size_of_printer)

python_del = Symbol("python_del", lambda *args: None, id="python_del", is_prim=True, python_printer=_del_printer)


def _size_in_range_printer(bsym, printer):
    size, low, high, error, message = bsym.args
    n = printer.value(size)
    if bsym.source is not None:
        filename, lineno = bsym.source
        message += f'\n  File "{filename}", line {lineno}'
    text = message.replace("{", "{{").replace("}", "}}").replace("{{size}}", "{" + n + "}")
    bounds = f"{printer.value(low)} <= {n}" + ("" if high is None else f" < {printer.value(high)}")
    return [f"if not {bounds}: raise {error}(f{text!r})"]


# a condition on a size that depends on tensor values (a boolean mask's: ``low <= size < high``, ``high`` None for
# no upper bound) the trace relies on, checked when the program runs: it raises ``error`` (the name of a builtin
# exception) with ``message`` (``{size}``: the size), as eager's kernel would, where the trace cannot guard on it
check_size_in_range = Symbol(
    "check_size_in_range",
    lambda size, low, high, error, message: None,
    id="check_size_in_range",
    is_prim=True,
    python_printer=_size_in_range_printer,
    tags=(OpTags.DONT_DCE,),
)
