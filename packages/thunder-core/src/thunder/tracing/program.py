"""Tracing a whole program: inputs to proxies, module state swapped for proxies, the user's function
run under the tracer, in-place updates of inputs written back, outputs collected, the prologue built.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

import torch

from thunder.core import prims
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.tracing.errors import TracingError
from thunder.tracing.prologue import PrologueBuilder
from thunder.tracing.script import inline_script_functions
from thunder.tracing.tracer import Tracer, TracingTensor, _current_tracer, _TracingMode

__all__ = ["TracedProgram", "trace_program"]


@dataclass
class _TensorInput:
    expr: str  # how the prologue reads it
    proxy: TensorProxy
    wrapper: TracingTensor
    is_module_state: bool
    container: dict | None = None  # module state: the dict it lives in, for swapping
    key: str | None = None
    original: torch.Tensor | None = None


@dataclass
class TracedProgram:
    computation: TraceCtx
    prologue: PrologueBuilder
    signature: inspect.Signature
    tensor_inputs: list[_TensorInput]
    rebuild_output: Any  # None, or a function from the computation's flat output to the user's structure
    log: list
    fn_name: str
    grad_enabled: bool
    requires_grad: bool = False
    autocast: bool = False  # traced with autocast on: the program holds its casts


def _emit_state_reads(prologue: PrologueBuilder, inputs: _InputBuilder, used: set[str]) -> None:
    """Module tensors the computation uses become prologue locals, checked with the arguments."""
    for name, expr, proxy, example in inputs.state_reads:
        if name in used:
            prologue.emit(f"{name} = {expr}")
            prologue.check_tensor(name, proxy, example)


_UNGUARDED_MODULE_ATTRIBUTES = frozenset({"training", "_is_full_backward_hook"})


def _sanitize(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


class _InputBuilder:
    def __init__(self, trace: TraceCtx, prologue: PrologueBuilder):
        self.trace = trace
        self.prologue = prologue
        self.tensors: list[_TensorInput] = []
        self.by_id: dict[int, TracingTensor] = {}
        self.state_reads: list = []  # (local name, expression, proxy, example) for module tensors

    # user arguments: returns what user code sees
    def argument(self, value, expr: str, name: str):
        pb = self.prologue
        if isinstance(value, TracingTensor):
            raise TracingError(
                "a thunder stand-in tensor was passed to a jitted function; don't jit inside a jitted function"
            )
        if isinstance(value, torch.Tensor):
            proxy = TensorProxy(
                self.trace.add_name(name),
                shape=value.shape,
                dtype=value.dtype,
                device=value.device,
                requires_grad=value.requires_grad,
            )
            pb.check_tensor(expr, proxy, value)
            wrapper = TracingTensor(proxy)
            if isinstance(value, torch.nn.Parameter):
                wrapper._is_param = True
            self.tensors.append(_TensorInput(expr, proxy, wrapper, False))
            return wrapper
        t = type(value)
        if t is tuple or t is list or (isinstance(value, tuple) and hasattr(value, "_fields")):
            pb.fail_unless(f"type({expr}) is {pb.constant(t, '_type')} and len({expr}) == {len(value)}")
            items = [self.argument(v, f"{expr}[{i}]", f"{name}_{i}") for i, v in enumerate(value)]
            return t(*items) if hasattr(value, "_fields") else t(items)
        if t is dict and all(isinstance(k, str) for k in value):
            keys = pb.constant(frozenset(value), "_keys")
            pb.fail_unless(f"type({expr}) is dict and {expr}.keys() == {keys}")
            return {k: self.argument(v, f"{expr}[{k!r}]", f"{name}_{_sanitize(k)}") for k, v in value.items()}
        if isinstance(value, torch.nn.Module):
            pb.check_value(expr, value)
            self.module_state(value, pb.constant(value, "_module"), f"t_{name}_" if name else "t_")
            return value
        pb.check_value(expr, value)
        return value

    def module_state(self, module: torch.nn.Module, module_expr: str, prefix: str) -> None:
        """Swaps every parameter and buffer of ``module`` (recursively) for a stand-in."""
        pb = self.prologue
        for mname, m in module.named_modules():
            m_expr = pb.constant(m, "_module") if mname else module_expr
            pb.fail_if(f"{m_expr}.training is not {m.training}")
            # plain Python attributes (eps, scale, flags) the forward may read are specialised on
            for attr, value in m.__dict__.items():
                if attr in _UNGUARDED_MODULE_ATTRIBUTES or not attr.isidentifier():
                    continue
                if value is None or type(value) in (bool, int, float, str):
                    pb.check_value(f"{m_expr}.{attr}", value)
            for kind, container in (("_parameters", m._parameters), ("_buffers", m._buffers)):
                for key, t in list(container.items()):
                    if t is None:
                        continue
                    wrapper = self.by_id.get(id(t))
                    if wrapper is None:
                        qual = f"{mname}.{key}" if mname else key
                        proxy = TensorProxy(
                            self.trace.add_name(prefix + _sanitize(qual)),
                            shape=t.shape,
                            dtype=t.dtype,
                            device=t.device,
                            requires_grad=t.requires_grad,
                        )
                        wrapper = TracingTensor(proxy)
                        if kind == "_parameters":
                            wrapper._is_param = True
                        self.by_id[id(t)] = wrapper
                        self.tensors.append(_TensorInput(proxy.name, proxy, wrapper, True, container, key, t))
                        self.state_reads.append((proxy.name, f"{m_expr}.{kind}[{key!r}]", proxy, t))
                    else:
                        self.tensors.append(_TensorInput("", wrapper._thunder_proxy, wrapper, True, container, key, t))
                    container[key] = wrapper

    def restore(self) -> list[tuple[_TensorInput, Any]]:
        """Puts the original tensors back; returns entries whose slot the program reassigned."""
        reassigned = []
        for ti in self.tensors:
            if ti.container is not None:
                current = ti.container.get(ti.key)
                if current is not ti.wrapper:
                    reassigned.append((ti, current))
                ti.container[ti.key] = ti.original
        return reassigned


def _collect_output(x, acc: list):
    """The output with TracingTensors replaced by proxies; rebuildable structure noted."""
    if isinstance(x, TracingTensor):
        return x._thunder_proxy
    if isinstance(x, torch.Tensor):
        raise TracingError(
            "the jitted function returned a tensor created outside of it (a global?); return it separately"
        )
    if isinstance(x, torch.Size):
        return x
    t = type(x)
    if t is tuple or t is list:
        return t(_collect_output(y, acc) for y in x)
    if t is dict:
        return {k: _collect_output(v, acc) for k, v in x.items()}
    if isinstance(x, tuple):
        acc.append(True)
        if hasattr(t, "n_fields"):
            return t(tuple(_collect_output(y, acc) for y in x))
        return t(*(_collect_output(y, acc) for y in x))
    if isinstance(x, dict):
        acc.append(True)
        out = copy.copy(x)
        for k, v in x.items():
            out[k] = _collect_output(v, acc)
        return out
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        acc.append(True)
        return dataclasses.replace(
            x, **{f.name: _collect_output(getattr(x, f.name), acc) for f in dataclasses.fields(x) if f.init}
        )
    return x


def _printable(x) -> bool:
    t = type(x)
    if isinstance(x, Proxy) or x is None or t in (bool, int, float, str):
        return True
    if t is tuple or t is list:
        return all(_printable(y) for y in x)
    if t is dict:
        return all(type(k) is str and _printable(v) for k, v in x.items())
    return False


def _make_rebuild(structure):
    """Returns (flat proxies to return, a function rebuilding ``structure`` from their values)."""
    leaves = flat_proxies_deep(structure)

    def rebuild(values):
        mapping = {id(p): v for p, v in zip(leaves, values)}
        return _substitute(structure, mapping)

    return leaves, rebuild


def flat_proxies_deep(x, acc=None):
    if acc is None:
        acc = []
    if isinstance(x, Proxy):
        acc.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x:
            flat_proxies_deep(y, acc)
    elif isinstance(x, dict):
        for y in x.values():
            flat_proxies_deep(y, acc)
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            flat_proxies_deep(getattr(x, f.name), acc)
    return acc


def _substitute(x, mapping):
    if isinstance(x, Proxy):
        return mapping[id(x)]
    if isinstance(x, torch.Size):
        return x
    t = type(x)
    if t is tuple or t is list:
        return t(_substitute(y, mapping) for y in x)
    if isinstance(x, tuple):
        if hasattr(t, "n_fields"):
            return t(tuple(_substitute(y, mapping) for y in x))
        return t(*(_substitute(y, mapping) for y in x))
    if isinstance(x, dict):
        out = copy.copy(x)
        for k, v in x.items():
            out[k] = _substitute(v, mapping)
        return out
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(
            x, **{f.name: _substitute(getattr(x, f.name), mapping) for f in dataclasses.fields(x) if f.init}
        )
    return x


class _patched_replacements:
    """While tracing, functions registered with ``register_operator(replaces=...)`` call their operator."""

    def __init__(self, executors, fn):
        self.patches = []
        for ex in executors:
            for module, attr, original, sym in ex.replacements:
                self.patches.append((module.__dict__, attr, original, sym))
                fn_globals = getattr(fn, "__globals__", None)
                if fn_globals is not None and fn_globals.get(attr) is original and fn_globals is not module.__dict__:
                    self.patches.append((fn_globals, attr, original, sym))

    def __enter__(self):
        for namespace, attr, original, sym in self.patches:
            if namespace.get(attr) is original:
                namespace[attr] = _replacement(sym, original)
        return self

    def __exit__(self, *exc):
        for namespace, attr, original, _ in self.patches:
            namespace[attr] = original
        return False


def _replacement(sym, original):
    def call_operator(*args, **kwargs):
        return sym(*args, **kwargs)

    call_operator.__wrapped__ = original
    return call_operator


def _as_called(signature: inspect.Signature, values: dict, given: set, n_positional: int) -> tuple[tuple, dict]:
    """``values`` (by parameter name) split into the positional and keyword arguments of the user's call."""
    args, kwargs = [], {}
    for i, (name, param) in enumerate(signature.parameters.items()):
        if name not in given:
            continue
        if param.kind is param.VAR_POSITIONAL:
            args.extend(values[name])
        elif param.kind is param.VAR_KEYWORD:
            kwargs.update(values[name])
        elif param.kind is not param.KEYWORD_ONLY and i < n_positional:
            args.append(values[name])
        else:
            kwargs[name] = values[name]
    return tuple(args), kwargs


def trace_program(
    fn,
    args: tuple,
    kwargs: dict,
    *,
    module: torch.nn.Module | None,
    executors,
    checks: bool = True,
    record_log: bool = True,
) -> TracedProgram:
    """Traces ``fn(*args, **kwargs)`` (``fn`` is ``module.forward`` for modules) into a computation trace."""
    try:
        signature = inspect.signature(fn)
    except (ValueError, TypeError):  # builtins such as torch.sin have no introspectable signature
        signature = inspect.Signature(
            [
                inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD),
            ]
        )
    fn_name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{fn_name}() was called with arguments that do not match its signature: {e}") from None
    given = set(bound.arguments)
    bound.apply_defaults()  # defaulted arguments are specialised on (and checked) like given ones

    trace = TraceCtx("computation")
    prologue = PrologueBuilder(checks=checks)
    tracer = Tracer(trace, record_log=record_log)
    inputs = _InputBuilder(trace, prologue)
    grad_enabled = torch.is_grad_enabled()
    prologue.check_grad_and_autocast(grad_enabled)

    with tracectx(trace):
        wrapped = {}
        for name, value in bound.arguments.items():
            param = signature.parameters[name]
            if param.kind is param.VAR_POSITIONAL:
                prologue.fail_unless(f"len({name}) == {len(value)}")
                wrapped[name] = tuple(inputs.argument(v, f"{name}[{i}]", f"{name}_{i}") for i, v in enumerate(value))
            elif param.kind is param.VAR_KEYWORD:
                prologue.fail_unless(f"{name}.keys() == {prologue.constant(frozenset(value), '_keys')}")
                wrapped[name] = {k: inputs.argument(v, f"{name}[{k!r}]", k) for k, v in value.items()}
            else:
                wrapped[name] = inputs.argument(value, name, name)
        # the function is called as the user called it, as nn.Module.__call__ does: positional arguments
        # stay positional, keywords stay keywords, defaults are left to it (decorators such as
        # transformers' may read arguments from **kwargs)
        wrapped_args, wrapped_kwargs = _as_called(signature, wrapped, given, len(args))
        if module is not None:
            inputs.module_state(module, "_self_module", "t_")
            prologue.trace.constants["_self_module"] = module
        tracer.input_names = {t.proxy.name for t in inputs.tensors}

        compiling_flag = torch.compiler._is_compiling_flag if hasattr(torch.compiler, "_is_compiling_flag") else None
        _current_tracer.append(tracer)
        try:
            with _patched_replacements(executors, fn), inline_script_functions(module, fn), _TracingMode(tracer):
                if compiling_flag is not None:
                    torch.compiler._is_compiling_flag = True
                try:
                    result = fn(*wrapped_args, **wrapped_kwargs)
                finally:
                    if compiling_flag is not None:
                        torch.compiler._is_compiling_flag = compiling_flag
        finally:
            _current_tracer.pop()
            reassigned = inputs.restore()
        tracer.finish()

        # in-place updates of inputs (buffers, arguments) are written back at the end
        for ti, current in reassigned:
            if not isinstance(current, TracingTensor):
                raise TracingError(
                    f"the program replaced the module tensor {ti.expr or ti.key} with a {type(current).__name__}; "
                    "thunder supports updating module tensors in place only"
                )
            ti.wrapper._thunder_proxy = current._thunder_proxy
        written = set()
        for ti in inputs.tensors:
            new = ti.wrapper._thunder_proxy
            if new is not ti.proxy and ti.proxy.name not in written:
                written.add(ti.proxy.name)
                prims.copy_(new, ti.proxy)

        acc: list = []
        structure = _collect_output(result, acc)
        rebuild = None
        if not _printable(structure):
            leaves, rebuild = _make_rebuild(structure)
            structure = tuple(leaves)
        trace.bound_symbols.append(prims.python_return.bind(structure, output=None))

    # the computation takes the user's tensors, then the module state the program used
    used = set()
    for bsym in trace.bound_symbols:
        used.update(p.name for p in bsym.flat_args)
    tensor_inputs = []
    seen = set()
    for ti in inputs.tensors:
        if ti.proxy.name in seen or not ti.expr:
            continue
        if ti.is_module_state and ti.proxy.name not in used:
            continue
        seen.add(ti.proxy.name)
        tensor_inputs.append(ti)
    trace.args = [ti.proxy for ti in tensor_inputs]
    _emit_state_reads(prologue, inputs, {ti.proxy.name for ti in tensor_inputs})
    trace.scopes = [trace.bound_symbols]
    trace.user_call_hook = None
    requires_grad = any(ti.proxy.requires_grad for ti in tensor_inputs)
    return TracedProgram(
        trace,
        prologue,
        signature,
        tensor_inputs,
        rebuild,
        tracer.log,
        fn_name,
        grad_enabled,
        requires_grad,
        autocast=tracer.autocast,
    )
