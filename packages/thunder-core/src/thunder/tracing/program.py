"""Tracing a whole program: inputs to proxies, module state swapped for proxies, the user's function
run under the tracer, in-place updates of inputs written back, outputs collected, the prologue built.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import threading
from dataclasses import dataclass
from typing import Any

import torch

from thunder.core import prims
from thunder.core.symbolic import SizeEnv, specialize
from thunder.core.trace import TraceCtx, tracectx
from thunder.tracing import guards, version_counters
from thunder.tracing.aliasing_facts import build_aliasing_record
from thunder.tracing.attention_kernels import enabled_kernels
from thunder.tracing.errors import TracingError, data_dependent_size_error, runtime_value_argument_error
from thunder.tracing.inputs import (
    _ABSENT,
    _HOOK_DICTS,
    _emit_state_reads,
    _InputBuilder,
    _TensorInput,
    outside_tensors_returned,
)
from thunder.tracing.known_values import InputIndexValues
from thunder.tracing.outputs import (
    _collect_output,
    _copy_outputs_holding_overwritten_inputs,
    copy_fresh_outputs_run_as_views,
    rederive_symbolic_views,
)
from thunder.tracing.post_call import PostCall, emit_writes, unalias_outputs
from thunder.tracing.prologue import PrologueBuilder, parameter_locals
from thunder.tracing.script import inline_script_functions
from thunder.tracing.tracer import (
    Tracer,
    TracingTensor,
    _current_tracer,
    _TracingMode,
)
from thunder.tracing.type_shadow import namespaces_of, shadowed_type

__all__ = ["TracedProgram", "trace_program"]


@dataclass
class TracedProgram:
    computation: TraceCtx
    prologue: PrologueBuilder
    signature: inspect.Signature
    tensor_inputs: list[_TensorInput]
    # None, or finish(computation's output, *objects at rebuild_args) -> the user's output (and object updates)
    rebuild_output: Any
    log: list
    fn_name: str
    grad_enabled: bool
    requires_grad: bool = False
    autocast: bool = False  # traced with autocast on: the program holds its casts
    side_effects: bool = False  # the traced code changed module attributes or globals it depends on
    rebuild_args: list = dataclasses.field(default_factory=list)  # prologue expressions passed to rebuild_output
    size_inputs: list = dataclasses.field(default_factory=list)  # SizeProxy arguments after the tensors
    # (prologue expression of a caller's tensor, eager's bumps of its version counter): the arguments an update
    # reached, whose versions the call sets as eager leaves them (thunder/tracing/version_counters.py)
    version_bumps: list = dataclasses.field(default_factory=list)


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
    tracing_thread = threading.get_ident()

    def call_operator(*args, **kwargs):
        if threading.get_ident() != tracing_thread:  # eager code in another thread while this one traces
            return original(*args, **kwargs)
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


class _RepeatedArgumentError(Exception):
    """Tracing raised with a tensor given twice traced as two stand-ins (see ``trace_program``)."""


def trace_program(fn, args: tuple, kwargs: dict, **options) -> TracedProgram:
    """Traces ``fn(*args, **kwargs)`` (``fn`` is ``module.forward`` for modules) into a computation trace: see
    ``_trace_program``. Where tracing raises and a tensor was given twice, it is traced once more with one stand-in
    for that tensor, as eager has one tensor: the error, if any, is that tracing's."""
    try:
        return _trace_program(fn, args, kwargs, **options)
    except _RepeatedArgumentError:
        return _trace_program(fn, args, kwargs, **{**options, "share_repeated": True})


def _trace_program(
    fn,
    args: tuple,
    kwargs: dict,
    *,
    module: torch.nn.Module | None,
    executors,
    checks: bool = True,
    record_log: bool = True,
    share_repeated: bool = False,
    dynamic=None,
) -> TracedProgram:
    """Traces ``fn(*args, **kwargs)`` (``fn`` is ``module.forward`` for modules) into a computation trace.

    A tensor passed twice is two inputs (functional transforms see one per position) unless the program
    updates it in place: then it is traced again with one stand-in, so the update reaches every name.

    ``dynamic(expr, tensor)`` names the dimensions of an argument tensor to trace as symbolic sizes.
    """
    try:
        # the parameters of the function called, not of one it wraps (``functools.wraps``): a wrapper taking
        # ``(*args, **kwargs)`` may treat an argument given by keyword unlike the same one given positionally,
        # so the prologue must tell the two calls apart
        signature = inspect.signature(fn, follow_wrapped=False)
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
    # the names the prologue reads the parameters under: never one its generated code reads as a global
    local = prologue.param_locals = parameter_locals(signature.parameters)
    tracer = Tracer(trace, record_log=record_log)
    # symbolic sizes: the dimensions ``dynamic`` names, and sizes that depend on tensor values (nonzero's)
    size_env = SizeEnv(trace.make_name)
    prologue.size_env = size_env
    trace.tags["size_env"] = size_env  # (the traces transforms derive from this one keep it)
    inputs = tracer.inputs = _InputBuilder(trace, prologue, share_repeated, dynamic, size_env)
    grad_enabled = torch.is_grad_enabled()
    prologue.check_grad_and_autocast(grad_enabled)

    with tracectx(trace), size_env:
        wrapped = {}
        for name, value in bound.arguments.items():
            param = signature.parameters[name]
            expr = local[name]
            if param.kind is param.VAR_POSITIONAL:
                prologue.fail_unless(f"len({expr}) == {len(value)}")
                wrapped[name] = tuple(inputs.argument(v, f"{expr}[{i}]", f"{name}_{i}") for i, v in enumerate(value))
            elif param.kind is param.VAR_KEYWORD:
                prologue.fail_unless(f"{expr}.keys() == {prologue.constant(frozenset(value), '_keys')}")
                wrapped[name] = {k: inputs.argument(v, f"{expr}[{k!r}]", k) for k, v in value.items()}
            else:
                wrapped[name] = inputs.argument(value, expr, name)
        # the function is called as the user called it, as nn.Module.__call__ does: positional arguments
        # stay positional, keywords stay keywords, defaults are left to it (decorators such as
        # transformers' may read arguments from **kwargs)
        wrapped_args, wrapped_kwargs = _as_called(signature, wrapped, given, len(args))
        target = fn
        if module is not None:
            prologue.trace.constants["_self_module"] = module
            # the module is called (on its shadow) as nn.Module.__call__ does: its forward hooks run too
            target = inputs.module_state(module, "_self_module", "t_")
        user_functions: list = []
        dependencies = _guard_code_dependencies(prologue, fn, inputs, user_functions)
        if inputs.alias_overlapping():
            tracer.layout_read = tracer.offsets_read = True
        post_call = PostCall(inputs.tensors, inputs.state_reads)
        inputs.on_captured = post_call.add_input
        tracer.before_layout_change = post_call.take_layouts
        tracer.input_names = {t.proxy.name for t in inputs.tensors}
        tracer.input_index_values = InputIndexValues(prologue, inputs.tensors)

        compiling_flag = torch.compiler._is_compiling_flag if hasattr(torch.compiler, "_is_compiling_flag") else None
        _current_tracer.append(tracer)
        try:
            with (
                _patched_replacements(executors, fn),
                inline_script_functions(module, fn),
                shadowed_type(namespaces_of(user_functions)),
                _TracingMode(tracer),
            ):
                if compiling_flag is not None:
                    torch.compiler._is_compiling_flag = True
                try:
                    result = target(*wrapped_args, **wrapped_kwargs)
                except Exception as e:
                    if type(e).__name__ == "GuardOnDataDependentSymNode":  # user code branched on such a size
                        raise data_dependent_size_error(e, e.__traceback__) from None
                    if isinstance(e, TypeError) and (refused := runtime_value_argument_error(e)) is not None:
                        raise refused from None
                    if inputs.repeated and not share_repeated:
                        # (a tensor given twice, traced as two stand-ins: eager's error may be one the one tensor
                        # does not raise, x.copy_(y) of an expanded x that y is: traced again with one stand-in)
                        raise _RepeatedArgumentError from e
                    raise
                finally:
                    if compiling_flag is not None:
                        torch.compiler._is_compiling_flag = compiling_flag
        finally:
            _current_tracer.pop()
            reassigned = inputs.restore()
        tracer.finish()
        result = outside_tensors_returned(tracer, result)
        side_effects = inputs.apply_attribute_updates() or _dependencies_changed(dependencies)
        _check_no_stand_in_escaped(dependencies)

        # in-place updates of inputs (buffers, arguments) are written back at the end
        for ti, current in reassigned:
            if not isinstance(current, TracingTensor):
                raise TracingError(
                    f"the program replaced the module tensor {ti.expr or ti.key} with a {type(current).__name__}; "
                    "thunder supports updating module tensors in place only"
                )
            ti.wrapper._thunder_proxy = current._thunder_proxy
        _copy_outputs_holding_overwritten_inputs(result, inputs.tensors)
        copy_fresh_outputs_run_as_views(result, inputs.tensors)
        if size_env.order:
            rederive_symbolic_views(result, inputs.tensors)
        written = set()
        writes = []
        for ti in inputs.tensors:
            new = post_call.elements(ti)
            if new is not ti.proxy and ti.proxy.name not in written:
                written.add(ti.proxy.name)
                writes.append((new, ti.proxy))
        inputs.refuse_updates_of_shared_captured(written)
        if writes:
            # (arguments sharing a storage are views of it: a write reaches them all)
            aliased = {ti.proxy.name for ti in inputs.tensors if ti.wrapper._tt_view is not None}
            unalias_outputs(result, trace, written | aliased, set(post_call.exprs))
        writes = emit_writes(writes, trace)
        if size_env.order and tracer.layout_read:
            # the layout of an input with symbolic sizes is checked as "contiguous": others are specialised
            for ti in inputs.tensors:
                if ti.example is not None and not ti.example.is_contiguous():
                    specialize(ti.proxy.shape)
        prologue.check_layout = tracer.layout_read
        prologue.check_offsets = tracer.offsets_read
        if tracer.attention_kernels is not None:  # (an attention traced as the kernel eager runs: attention_kernels.py)
            prologue.trace.constants["_attention_kernels"] = enabled_kernels
            prologue.fail_if(f"_attention_kernels() != {tracer.attention_kernels!r}", "the attention kernels enabled")
        if written:  # an update reaches other arguments exactly when they share its storage
            # (and from the tensors read from outside the arguments: a later call passing one of them traces again)
            prologue.distinct_storages = frozenset(
                ti.expr for ti in inputs.tensors if not ti.is_module_state or ti.captured
            )
    # (a tensor given twice is one object: an update, or a layout change (x.t_()), reaches both names)
    relaid = any(getattr(ti.wrapper, "_tt_original", None) is not None for ti in inputs.tensors)
    if (written or relaid) and inputs.repeated and not share_repeated:
        return _trace_program(
            fn,
            args,
            kwargs,
            module=module,
            executors=executors,
            checks=checks,
            record_log=record_log,
            share_repeated=True,
            dynamic=dynamic,
        )
    with tracectx(trace), size_env:
        structure, rebuild, finish_args = _collect_output(result, inputs.objects)
        post_call.plan(
            (ti.wrapper for ti in inputs.tensors),
            result,
            {id(ti.wrapper) for ti in inputs.tensors if ti.proxy.name in written},
            {name for _, names in inputs.shared_storages for name in names},
        )
        # (they are made again from the inputs' layouts: those must stay as traced; an input's own layout is read
        # at each call)
        if any(v.layout is not None for v in post_call.views):
            prologue.check_layout = prologue.check_offsets = True
        if post_call.internal_views:  # (whether eager's output is a view follows from the inputs' layouts)
            prologue.check_layout = True
        structure, rebuild, finish_args = post_call.wrap_output(structure, rebuild, finish_args)
        trace.bound_symbols.append(prims.python_return.bind(structure, output=None))
        trace.tags["stale_saves"] = tracer.saves.stale()  # (the backward raises eager's error: split.py)
        trace.tags["aliasing"] = build_aliasing_record(
            trace,
            {ti.proxy.name: post_call.exprs.get(id(ti.wrapper)) or ti.expr or ti.key for ti in inputs.tensors},
            inputs.shared_storages,
            writes,
            post_call.steps,
            post_call.returned,
            post_call.views,
            post_call.internal_views,
            tracer.unseen_by_version_counter,
        )

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
    size_inputs = list(size_env.order)
    trace.args = [ti.proxy for ti in tensor_inputs] + size_inputs
    _emit_state_reads(prologue, inputs, {ti.proxy.name for ti in tensor_inputs})
    trace.scopes = [trace.bound_symbols]
    trace.user_call_hook = None
    # (or a tensor computed inside was made a leaf requiring grad: x.requires_grad_())
    requires_grad = any(ti.proxy.requires_grad for ti in tensor_inputs) or any(
        "grad_source" in b.sym.tags for b in trace.bound_symbols
    )
    # (the step after the call bumps an argument once more per layout step it takes: t_, set_ ...)
    layout_steps = collections.Counter(step[0] for step in post_call.steps)
    version_bumps = [
        (ti.expr, max(n - layout_steps[ti.expr], 0))
        for ti, n in zip(tensor_inputs, version_counters.counts_of(ti.wrapper for ti in tensor_inputs))
        if n is not None
    ]
    # (an argument that eager's in-place ops reached but the program neither writes back nor restrides,
    # x.squeeze_() without a size-1 dim, x.copy_(x): its version is set before the call, at which the program's
    # autograd node saves it, as eager's nodes after the update do, whether it requires grad or is only read by a
    # gradient (y = x * w))
    # (an argument sharing its counter with a written one, a1 = a0[..., :1], gets its bumps from that write)
    written_counters = {id(ti.wrapper._tt_counter) for ti in tensor_inputs if ti.proxy.name in written}
    unwritten = {
        ti.expr
        for ti in tensor_inputs
        if ti.proxy.name not in written
        and not layout_steps[ti.expr]
        and (ti.wrapper._tt_counter is None or id(ti.wrapper._tt_counter) not in written_counters)
    }
    version_bumps = [(expr, n, expr in unwritten and n > 0) for expr, n in version_bumps]
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
        side_effects=side_effects,
        rebuild_args=finish_args,
        size_inputs=size_inputs,
        version_bumps=version_bumps,
    )


_IMMUTABLE_DEFAULTS = frozenset((type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device))


def _guard_code_dependencies(prologue: PrologueBuilder, fn, inputs: _InputBuilder, visited: list | None = None):
    """Checks for the globals and closure variables read by ``fn``, the modules' forwards and their hooks.

    The Python functions followed are appended to ``visited``."""
    functions = [fn]
    for m in inputs.originals:
        functions.append(type(m).forward)
        d = m.__dict__
        functions.append(d.get("forward"))
        for hooks in _HOOK_DICTS:
            functions.extend(d.get(hooks, {}).values())
    trace_only: list = []
    visited = [] if visited is None else visited
    globals_read, cells = guards.code_dependencies(functions, trace_only, visited)
    guards.warn_trace_only(trace_only)
    if not prologue.checks:
        return globals_read, cells
    for f, attr, value in guards.function_state(visited):
        # a function's attributes (fn.flag) and defaults, read by the code, as globals are
        what = f"{f.__qualname__}.{attr}"
        f_expr = prologue.constant(f, "_fn")
        if attr == "__defaults__" and all(type(v) in _IMMUTABLE_DEFAULTS for v in value):
            # (a tuple of immutable values changes only by assigning a new one: an identity check suffices)
            prologue.fail_if(f"{f_expr}.{attr} is not {prologue.constant(value, '_defaults')}", what)
        elif attr in ("__defaults__", "__kwdefaults__"):
            guards.guard_value(prologue, f"{f_expr}.{attr}", value, what)
        else:
            guards.guard_value(prologue, f"{f_expr}.__dict__.get({attr!r})", value, what)
    for g, name, value in globals_read:
        ns = prologue.constant(g, "_globals")
        guards.guard_value(prologue, f"{ns}.get({name!r})", value, f"the global {name}", read_from=(g, name))
    for cell, name, value in cells:
        guards.guard_value(
            prologue, f"{prologue.constant(cell, '_cell')}.cell_contents", value, f"the closure variable {name}"
        )
    return globals_read, cells


def _check_no_stand_in_escaped(dependencies) -> None:
    """Raises when the traced code stored a tensor it computed into a global or closure container (a dict,
    list, set or tuple it reads): the program cannot recreate that side effect, and the stand-in left there
    would be a silently wrong value after the call."""

    def escaped(x, depth: int) -> bool:
        if isinstance(x, TracingTensor):
            return True
        if depth > 3:
            return False
        if type(x) in (dict,):
            return any(escaped(v, depth + 1) for v in list(x.values()))
        if type(x) in (list, tuple, set):
            return any(escaped(v, depth + 1) for v in list(x))
        return False

    globals_read, cells = dependencies
    found = [name for g, name, _ in globals_read if escaped(g.get(name, None), 0)]
    for cell, name, _ in cells:
        try:
            if escaped(cell.cell_contents, 0):
                found.append(name)
        except ValueError:
            pass
    if found:
        raise TracingError(
            f"the jitted function stored a tensor it computed into {', '.join(repr(n) for n in found)} (a global or "
            "closure container): thunder cannot repeat that side effect on later calls. Return the tensor from the "
            "function and store it after the call."
        )


def _dependencies_changed(dependencies) -> bool:
    """Whether the traced code rebound a global or closure variable it reads (a side effect of the call)."""
    globals_read, cells = dependencies
    for g, name, value in globals_read:
        if g.get(name, _ABSENT) is not value:
            return True
    for cell, _, value in cells:
        try:
            if cell.cell_contents is not value:
                return True
        except ValueError:
            return True
    return False
