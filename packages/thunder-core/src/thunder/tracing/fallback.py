"""The opaque fallback: torch calls without a torch-language symbol, run by PyTorch on meta tensors and recorded as one opaque symbol."""

from __future__ import annotations

import dis
import functools
from typing import Any

import torch

from thunder.core import devices, dtypes
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_leaves, tree_map
from thunder.core.symbol import Symbol, flat_proxies
from thunder.core.symbolic import current_size_env, hint, hints, size_env_of, specialize
from thunder.torch.meta_rules import ValuesDecideShape, meta_rule_for
from thunder.torch.registry import InplaceOp, torch_to_thunder
from thunder.tracing.errors import (
    TracingError,
    data_dependent_error,
    describe_location,
    user_frame,
)

T = torch.Tensor


def _can_cast(src: dtypes.dtype, dst: dtypes.dtype) -> bool:
    return dtypes.kind_rank(src) <= dtypes.kind_rank(dst)


def _dtype_title(d: dtypes.dtype) -> str:
    """PyTorch's name for a dtype in error messages (``Float``, ``Long``)."""
    return dtypes.torch_message_name(d.torch_dtype) or str(d.torch_dtype).replace("torch.", "").capitalize()


@functools.lru_cache(maxsize=4096)
def _instructions(code):
    ins_list = list(dis.get_instructions(code))
    return {ins.offset: i for i, ins in enumerate(ins_list)}, ins_list


def _stored_name(code, lasti: int) -> str | None:
    """The variable the instruction after ``lasti`` stores to (``x = f(...)``), if any."""
    try:
        index, ins = _instructions(code)
    except Exception:
        return None
    i = index.get(lasti)
    if i is None:
        return None
    for nxt in ins[i + 1 : i + 4]:
        if nxt.opname in ("CACHE", "PRECALL", "EXTENDED_ARG", "NOP"):
            continue
        if nxt.opname in ("STORE_FAST", "STORE_NAME", "STORE_DEREF", "STORE_GLOBAL"):
            return nxt.argval
        return None
    return None


def interpreter_log_records(log: list[tuple]) -> list[dict[str, Any]]:
    """The tracer's log of intercepted calls as the records ``thunder.last_interpreter_log`` returns."""
    records = []
    for func, mapped, fell_back, file, line, user_file, user_line in log:
        if fell_back:
            symbol = "fallback"
        elif isinstance(mapped, Symbol):
            symbol = mapped.name
        elif type(mapped) is InplaceOp and isinstance(mapped.fn, Symbol):
            symbol = mapped.fn.name
        else:
            symbol = "adapter"
        records.append(
            {
                "kind": "symbol" if isinstance(func, Symbol) else "call",
                "fn": _func_name(func),
                "symbol": symbol,
                "file": file,
                "line": line,
                "user_file": user_file,
                "user_line": user_line,
            }
        )
    return records


def _func_name(func) -> str:
    if isinstance(func, Symbol):
        return func.name
    name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    if name is None:
        owner = getattr(func, "__self__", None)
        name = f"Tensor.{getattr(owner, '__name__', '?')}"
    module = getattr(func, "__module__", None)
    if module and module.startswith("torch") and not name.startswith("Tensor"):
        return f"{module.replace('torch._C._nn', 'torch.nn.functional').replace('torch._C._VariableFunctions', 'torch')}.{name}"
    name = name.replace("TensorBase.", "Tensor.")
    return name if name.startswith(("Tensor", "torch")) else f"torch.{name}"


# ---------------------------------------------------------------- opaque fallback symbols

_fallback_cache: dict[Any, Symbol] = {}


def _to_meta(x, fake: bool = False):
    """Meta tensors for an opaque op's proxies; with ``fake``, fake tensors with the proxies' symbolic sizes (made
    inside the size environment's FakeTensorMode)."""
    return tree_map(lambda y: _leaf_to_meta(y, fake), x)


def _leaf_to_meta(x, fake: bool):
    if isinstance(x, TensorProxy):
        if fake:
            return torch.empty(x.shape, dtype=x.dtype.torch_dtype, device=x.device._torch_device)
        specialize(x.shape)  # (no symbolic sizes here: the op's output sizes are learned as numbers)
        return torch.empty(hints(x.shape), dtype=x.dtype.torch_dtype, device="meta")
    t = type(x)
    if not fake and (t is torch.SymInt or t is torch.Size):
        specialize(x)
        return hint(x) if t is torch.SymInt else torch.Size(hints(x))
    if isinstance(x, devices.Device):
        return x._torch_device
    return x


# (the run on zeros below reads tensors of the call's sizes: past this many elements the meta error stands alone)
_EAGER_CHECK_ELEMENTS = 1 << 16


def _raise_as_eager(func, args, kwargs, inplace: bool, meta_error: Exception) -> None:
    """Raises ``meta_error`` as eager's own error, at the user's line, where eager's call on the CPU raises it too
    (``x.imag`` of a real ``x``): asked of PyTorch on zeros of the arguments' sizes and dtypes (the random
    generator's state put back). Nothing where eager's call runs, or raises something else."""
    proxies = [p for p in flat_proxies((args, kwargs)) if isinstance(p, TensorProxy)]
    if any(p.device.devicetype is not devices.DeviceType.CPU for p in proxies):
        return
    if sum(max(1, int(torch.Size(hints(p.shape)).numel())) for p in proxies) > _EAGER_CHECK_ELEMENTS:
        return

    def zeros(x):
        if isinstance(x, TensorProxy):
            return torch.zeros(hints(x.shape), dtype=x.dtype.torch_dtype)
        return _leaf_to_meta(x, False) if not isinstance(x, devices.Device) else x._torch_device

    state = torch.get_rng_state()
    try:
        with torch._C.DisableTorchFunction(), torch.no_grad():
            zargs, zkwargs = tree_map(zeros, args), tree_map(zeros, kwargs)
            func(*zargs, **zkwargs)
    except Exception as e:  # noqa: BLE001
        if type(e) is type(meta_error) and str(e).split("\n")[0] == str(meta_error).split("\n")[0]:
            raise type(e)(f"{str(e).splitlines()[0]}\n  {describe_location(user_frame(3))}") from None
    finally:
        torch.set_rng_state(state)


def _result_device(args, kwargs):

    for p in flat_proxies((args, kwargs)):
        if isinstance(p, TensorProxy):
            return p.device
    d = kwargs.get("device")
    if d is not None:
        return devices.to_device(d)
    return devices.to_device(torch.get_default_device())


def _from_meta(x, device):
    return tree_map(
        lambda y: (
            TensorProxy(shape=y.shape, dtype=y.dtype, device=device, requires_grad=False)
            if isinstance(y, torch.Tensor)
            else y
        ),
        x,
    )


def _first_symbolic_size(x):
    """A symbolic size in ``x`` (the proxies' shapes included), or None."""
    for leaf in tree_leaves(x):
        sizes = leaf.shape if isinstance(leaf, TensorProxy) else leaf if type(leaf) is torch.Size else (leaf,)
        found = next((s for s in sizes if type(s) is torch.SymInt), None)
        if found is not None:
            return found
    return None


def _is_inplace_name(name: str) -> bool:
    return (
        name.endswith("_")
        and not name.endswith("__")
        or name in ("__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__")
    )


def fallback_inplace_op(func) -> InplaceOp:
    """An in-place torch callable run opaquely: a functional copy-and-update, then the tracer rebinds."""
    sym = fallback_symbol(func, force_inplace=True)
    return InplaceOp(sym)


def _run_tracking_grad(func, margs, mkwargs):
    """Runs ``func`` on meta inputs whose floating tensors require grad, so each output's ``requires_grad``
    says whether PyTorch's autograd differentiates it (``native_layer_norm``'s statistics and ``linalg.lu``'s
    pivots it does not). None when there is no floating input or the op refuses such inputs."""
    leaves = []

    def grad_leaf(x):
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex()):
            leaf = x.detach().requires_grad_(True)
            leaves.append(leaf)
            return leaf
        return x

    gargs = tree_map(grad_leaf, margs)
    gkwargs = tree_map(grad_leaf, mkwargs)
    if not leaves:
        return None
    try:
        with torch.enable_grad():
            return func(*gargs, **gkwargs)
    except Exception:
        pass
    # the op refuses some input that requires grad (native_batch_norm's running statistics): one run per
    # input, only that one requiring grad (through a non-leaf, so in-place updates of it are allowed); an
    # output is differentiable when some run makes it require grad
    combined = template = None
    for i in range(len(leaves)):
        plain = {id(x): x.detach() for j, x in enumerate(leaves) if j != i}
        plain[id(leaves[i])] = leaves[i].clone()
        swap = lambda x: plain.get(id(x), x) if isinstance(x, torch.Tensor) else x  # noqa: E731
        try:
            with torch.enable_grad():
                result = func(*tree_map(swap, gargs), **{k: tree_map(swap, v) for k, v in gkwargs.items()})
        except Exception:
            continue
        flat = list(result) if isinstance(result, (tuple, list)) else [result]
        if combined is None:
            combined, template = flat, result
        elif len(flat) == len(combined):
            combined = [r if isinstance(r, torch.Tensor) and r.requires_grad else c for c, r in zip(combined, flat)]
    if not isinstance(template, (tuple, list)):
        return combined[0] if combined else None
    return type(template)(combined)  # the structure of the op's result (tuple, list or return_types)


def _grad_leaves(x):
    """``x`` with its floating meta tensors requiring grad (a shape rule then says which outputs eager's autograd
    differentiates)."""
    return tree_map(
        lambda y: (
            y.detach().requires_grad_(True)
            if isinstance(y, torch.Tensor) and (y.is_floating_point() or y.is_complex())
            else y
        ),
        x,
    )


def _mark_nondifferentiable_outputs(result, out) -> None:
    """Marks the proxies in ``out`` whose meta counterpart in ``result`` has no gradient path."""
    flat_result = result if isinstance(result, (tuple, list)) else (result,)
    flat_out = out if isinstance(out, (tuple, list)) else (out,)
    if len(flat_result) != len(flat_out):
        return
    for r, o in zip(flat_result, flat_out):
        if isinstance(r, torch.Tensor) and isinstance(o, TensorProxy) and not r.requires_grad:
            o.nondifferentiable = True


_DATA_DEPENDENT_ERRORS = ("GuardOnDataDependentSymNode", "DataDependentOutputException", "DynamicOutputShapeException")


def _depends_on_values(error: BaseException) -> bool:
    """Whether running an op on fake tensors failed because it needed tensor values (an ``item()`` inside the
    op, a branch on a data-dependent size), seen through the errors it was wrapped in."""
    seen = 0
    while error is not None and seen < 8:
        if type(error).__name__ in _DATA_DEPENDENT_ERRORS:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def fallback_symbol(func, *, force_inplace: bool = False) -> Symbol:
    """An opaque symbol for a torch callable with no torch-language symbol: metadata from the meta device."""
    key = (func, force_inplace)
    sym = _fallback_cache.get(key)
    if sym is not None:
        return sym
    from thunder.executors.torchex import torch_path

    path = torch_path(func)
    raw_name = getattr(func, "__name__", None) or "op"
    inplace = force_inplace or _is_inplace_name(raw_name)
    if inplace:
        base = (path[0] if path else raw_name).replace(".", "_").replace("__", "_").strip("_")
        print_name, imports = f"functional_{base}", ()

        def run(a, *args, **kwargs):
            if raw_name == "as_strided_":  # (of the tensor's storage, which a clone of its elements lacks)
                return torch.as_strided(a, *args, **kwargs).clone()
            a = a.clone()
            func(a, *args, **kwargs)
            return a

        call_ctx = {print_name: run}
    elif path is not None:
        print_name, imports, call_ctx = path[0], (path[1],), None
    else:
        print_name = "opaque_" + "".join(c if c.isalnum() else "_" for c in raw_name)
        imports, call_ctx = (), {print_name: func}

    def meta(*args, **kwargs):
        symbolic = _first_symbolic_size((args, kwargs))
        env = size_env_of(symbolic) if symbolic is not None else None
        if env is not None:
            with env.fake_mode():
                out = _opaque_meta(args, kwargs, True)
            env.bind_data_dependent(out)
            return out
        try:
            return _opaque_meta(args, kwargs, False)
        except TracingError:
            env = current_size_env()
            if env is None:
                raise
            # no meta kernel, or sizes that depend on the values (nonzero, a boolean mask): PyTorch's fake tensors
            # give data-dependent sizes as symbols, read from the output at run time
            try:
                with env.fake_mode():
                    out = _opaque_meta(args, kwargs, True)
            except Exception as e:
                if _depends_on_values(e):  # (x[mask] with a 0-d mask: even the rank depends on its value)
                    raise data_dependent_error(
                        f"run {print_name} on these arguments, whose output's shape depends on tensor values "
                        "(a 0-d boolean index, a data-dependent branch inside the op)",
                        user_frame(2),
                    ) from None
                out = None
            if out is None:
                raise
            env.bind_data_dependent(out)
            return out

    def _opaque_meta(args, kwargs, fake: bool):
        margs, mkwargs = _to_meta(args, fake), _to_meta(kwargs, fake)
        rule = meta_rule_for(func)
        if rule is not None and not inplace:
            # no meta kernel: thunder's shape rule (eager's own error where eager refuses the arguments)
            env = None
            try:
                result = rule(*_grad_leaves(margs), **_grad_leaves(mkwargs))
            except ValuesDecideShape as e:
                env = current_size_env()
                if fake or not e.sized_later or env is None:
                    raise data_dependent_error(e.what, user_frame(2)) from None
                with env.fake_mode():  # the rule gives the size as a symbol, read from the output at run time
                    result = rule(*_grad_leaves(_to_meta(args, True)), **_grad_leaves(_to_meta(kwargs, True)))
            out = _from_meta(result, _result_device(args, kwargs))
            if env is not None:
                env.bind_data_dependent(out)
            if torch.is_grad_enabled():
                _mark_nondifferentiable_outputs(result, out)
            return out
        tracked = _run_tracking_grad(func, margs, mkwargs) if not inplace and torch.is_grad_enabled() else None
        if tracked is not None:
            out = _from_meta(tracked, _result_device(args, kwargs))
            _mark_nondifferentiable_outputs(tracked, out)
            return out
        try:
            with torch.no_grad():
                if inplace and raw_name == "as_strided_":
                    # (it may reach past the tensor's elements into its storage, which the meta copy lacks: the
                    # shape is as_strided's, which does not check the bounds on meta; the values come from the
                    # storage's stand-in, see Tracer._rebind_metadata)
                    result = torch.as_strided(*margs, **mkwargs)
                elif inplace:
                    target = margs[0].clone()
                    func(target, *margs[1:], **mkwargs)
                    result = target
                else:
                    result = func(*margs, **mkwargs)
        except Exception as e:
            detail = str(e).split("\n")[0]
            _raise_as_eager(func, args, kwargs, inplace, e)
            raise TracingError(
                f"thunder has no symbol for {print_name} and could not run it on the meta device to learn its "
                f"output's shape ({type(e).__name__}: {detail}). If its output shape depends on tensor values "
                "(nonzero, unique, boolean masks), it cannot be traced; otherwise please report it.\n"
                f"  {describe_location(user_frame(2))}"
            ) from e
        return _from_meta(result, _result_device(args, kwargs))

    sym = Symbol(
        print_name,
        meta,
        id=f"opaque::{print_name}",
        is_prim=True,
        print_name=print_name,
        imports=imports,
        call_ctx=call_ctx,
        tags=("opaque",),
    )
    sym.torch_fn = func
    sym.inplace = inplace
    from thunder.executors.torchex import ex as torch_ex

    sym.executor = torch_ex
    _fallback_cache[key] = sym
    if inplace and not force_inplace:
        torch_to_thunder.setdefault(func, InplaceOp(sym))
    return sym
