"""The prologue: generated Python that checks a call's inputs against what a trace specialised on,
unpacks the tensors the computation takes (arguments, parameters, buffers) and calls it.

A prologue returns ``MISS`` when the inputs do not match, so the caller tries the next cache entry.
Its checks are straight-line generated code, not a loop over descriptions.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import itertools
import linecache
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol
from thunder.core.symbolic import hint, hints, is_symbolic
from thunder.core.trace import TraceCtx
from thunder.tracing.autocast import any_autocast_enabled, autocast_state
from thunder.tracing.dict_versions import dict_version_function, tags_only_grow

__all__ = ["MISS", "PrologueBuilder", "parameter_locals", "size_local"]


def size_local(p) -> str:
    """The prologue's local variable holding the symbolic size ``p`` (a SizeProxy)."""
    return f"_size_{p.name}"


# the global names a prologue's body reads besides its constants (whose names start with "_", as its own locals'
# do): a parameter so named would shadow them, so the prologue reads it under another name (see parameter_locals).
# The builtins are those the checks call; tests/test_parameter_names.py checks the generated code reads no others.
_GLOBALS_READ = frozenset(
    ("MISS", "computation", "Tensor", "torch", "math", "dtypes", "devices")
    + ("type", "len", "list", "map", "any", "all", "isinstance", "float", "int", "str", "dict", "frozenset", "tuple")
    + ("complex", "bool", "max", "min", "abs", "round", "pow", "Exception")
)


def parameter_locals(names) -> dict[str, str]:
    """The name under which the prologue reads each of the function's parameters ``names``.

    A parameter keeps its name unless that name is one the generated code reads as a global (``type``, ``MISS``,
    ``computation``, a constant such as ``_tensor_guard0``) or uses as a local: then it becomes ``_arg_<name>``
    and the prologue is called through a forwarder with the user's exact signature (``PrologueBuilder.build``).
    """
    names = list(names)
    taken = set(names)
    result = {}
    for name in names:
        local = name
        if name in _GLOBALS_READ or name.startswith("_"):
            local = f"_arg_{name}"
            while local in taken:
                local = "_" + local
            taken.add(local)
        result[name] = local
    return result


class _Miss:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISS"


MISS = _Miss()


def _make_tensor_guard(tensors, strides: bool = False, dynamic=None):
    """Dynamo's C++ tensor check (dtype, device, sizes, requires_grad, type; strides when asked) when this
    torch has it. ``dynamic[i][d]``: dimension ``d`` of tensor ``i`` is symbolic (checked by the size guards)."""
    try:
        from torch._C._dynamo.guards import TensorGuards
    except ImportError:  # pragma: no cover - torch without dynamo
        return None
    dynamic = dynamic or [()] * len(tensors)
    try:
        sizes = [
            [None if d < len(dyn) and dyn[d] else n for d, n in enumerate(t.shape)] for t, dyn in zip(tensors, dynamic)
        ]
        strides_ = [
            list(t.stride()) if strides and not any(dyn) else [None] * t.ndim for t, dyn in zip(tensors, dynamic)
        ]
        return TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides_)
    except Exception:  # pragma: no cover - a changed private API: fall back to generated checks
        return None


def _odd_input(t) -> bool:
    """True for an input the C++ tensor guard must not see (a C++ exception there ends the process).

    Nested and sparse tensors raise a clear error; anything that is not a tensor is a cache miss.
    """
    if not isinstance(t, Tensor):
        return True
    if t.is_nested or t.layout is not torch.strided:
        raise TypeError(
            f"thunder.jit does not support {'nested' if t.is_nested else str(t.layout)} tensors as inputs; "
            "pass a regular (strided) tensor"
        )
    return False


_ABSENT = object()
# what a module's __dict__ holds that decides how calling it runs, besides its forward and its attributes
_MODULE_STATE_KEYS = ("training", "_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


class _ModuleChecks:
    """One prologue line checking many modules without hooks, in C loops over their ``__dict__``s.

    Each module keeps its training flag and its hook dicts (identity: the same dict objects), the
    hook dicts stay empty, no instance ``forward`` appears, and containers keep their submodules.
    The lists fill while tracing; the line reads them when it runs.
    """

    def __init__(self, builder: PrologueBuilder, line: int) -> None:
        self.line = line
        self.dicts: list[dict] = []
        self.states: list[tuple] = []
        self.hooks: list[dict] = []
        self.containers: list[dict] = []
        self.submodules: list[dict] = []
        self.submodule_dicts: list[dict] = []  # the containers' own ``_modules`` dicts (for the version gate)
        self.exprs: list[tuple[str, str]] = []
        # the modules and their classes (``module.__class__ = Other`` changes the forward, not the __dict__)
        self.modules: list[torch.nn.Module] = []
        self.classes: list[type] = []
        c = builder.constant
        self.names = {
            "modules": c(self.modules, "_modules_checked"),
            "classes": c(self.classes, "_module_classes"),
            "dicts": c(self.dicts, "_module_dicts"),
            "states": c(self.states, "_module_states"),
            "hooks": c(self.hooks, "_module_hooks"),
            "containers": c(self.containers, "_container_dicts"),
            "submodules": c(self.submodules, "_submodules"),
        }
        builder.trace.constants["_module_state_of"] = operator.itemgetter(*_MODULE_STATE_KEYS)
        builder.trace.constants["_submodules_of"] = operator.itemgetter("_modules")
        builder.trace.constants["_contains"] = operator.contains
        builder.trace.constants["_forward_key"] = itertools.repeat("forward")  # (map stops at the shorter input)

    def add(self, module: torch.nn.Module, state: tuple, expr: str, what: str) -> None:
        d = module.__dict__
        self.modules.append(module)
        self.classes.append(type(module))
        self.dicts.append(d)
        self.states.append(state)
        self.hooks.extend(state[1:])
        if module._modules:
            self.containers.append(d)
            self.submodules.append(dict(module._modules))
            self.submodule_dicts.append(module._modules)
        self.exprs.append((expr, what))

    def source(self) -> str:
        n = self.names
        return (
            f"if list(map(_module_state_of, {n['dicts']})) != {n['states']} or any({n['hooks']})"
            f" or any(map(_contains, {n['dicts']}, _forward_key))"
            f" or list(map(_submodules_of, {n['containers']})) != {n['submodules']}"
            f" or list(map(type, {n['modules']})) != {n['classes']}: return MISS"
        )

    def gated_source(self, builder: PrologueBuilder, dict_version) -> list[str]:
        """The checks behind a version gate: the tags of the modules' ``__dict__``s and of the containers'
        ``_modules`` are read first; when they equal those of the last call whose checks all passed, every key
        of those dicts still maps to the very same object (training flags, hook dicts, instance ``forward``,
        submodules, attributes), so only the hook dicts' contents are checked. The prologue stores the tags
        it read once all its checks pass (see ``PrologueBuilder._rendered_lines``).

        Where tags only grow (``dict_versions.tags_only_grow``), their sum stands for them: one number to compare
        instead of a list."""
        n = self.names
        c = builder.constant
        builder.trace.constants["_dict_version"] = dict_version
        gated = c(tuple(self.dicts) + tuple(self.submodule_dicts), "_gated_dicts")
        gate = builder.gate = c([None], "_gate")  # the tags of the last call that passed (None: none yet)
        if tags_only_grow():
            builder.trace.constants["_sum"] = sum
            read = f"_versions = _sum(map(_dict_version, {gated}))"
        else:
            read = f"_versions = list(map(_dict_version, {gated}))"
        return [
            read,
            f"_gate_ok = _versions == {gate}[0]",
            f"if not _gate_ok and (list(map(_module_state_of, {n['dicts']})) != {n['states']}"
            f" or any(map(_contains, {n['dicts']}, _forward_key))"
            f" or list(map(_submodules_of, {n['containers']})) != {n['submodules']}): return MISS",
            f"if any({n['hooks']}) or list(map(type, {n['modules']})) != {n['classes']}: return MISS",
        ]

    def separate_checks(self) -> list[str]:
        """The same checks one module per line, each returning what it guards (for the recompilation warning)."""
        n = self.names
        lines, c = [], 0
        for i, (expr, what) in enumerate(self.exprs):
            d = self.dicts[i]
            cond = (
                f"_module_state_of({expr}.__dict__) != {n['states']}[{i}] or any({n['states']}[{i}][1:])"
                f" or 'forward' in {expr}.__dict__ or type({expr}) is not {n['classes']}[{i}]"
            )
            if c < len(self.containers) and self.containers[c] is d:
                cond += f" or {expr}._modules != {n['submodules']}[{c}]"
                c += 1
            lines.append(f"if {cond}: return {what!r}")
        return lines


class _IdentityChecks:
    """Many checks of values read from dicts (module attributes, globals) behind one identity test.

    Each value the trace specialised on is immutable (a number, a string, ``None``, a tuple of them) or checked by
    identity anyway (a function, a class, a module), so finding the very same object under its key means its
    check passes. One line tests that for all of them in C loops (``dict.get`` then ``is``); only when an object
    was replaced (or a key removed) do the individual checks run, and decide as they would alone. A model's
    module attributes then cost a few nanoseconds each per call instead of an attribute lookup and a comparison
    each.
    """

    def __init__(self, builder: PrologueBuilder, line: int) -> None:
        self.line = line
        self.dicts: list[dict] = []
        self.keys: list[str] = []
        self.values: list = []
        self.checks: list[tuple[str, str | None]] = []  # (the check's line, what it guards)
        self.ends: list[int] = []  # the checks of read i are checks[ends[i - 1]:ends[i]]
        c = builder.constant
        self.names = {"dicts": c(self.dicts, "_read_dicts"), "keys": c(self.keys, "_read_keys")}
        self.names["values"] = c(self.values, "_read_values")
        builder.trace.constants["_all"] = all
        builder.trace.constants["_is"] = operator.is_
        builder.trace.constants["_dict_get"] = dict.get
        builder.trace.constants["_absent"] = itertools.repeat(_ABSENT)  # (map stops at the shorter input)

    def add(self, d: dict, key: str, value: Any, lines: list[str], descriptions: list[str | None]) -> None:
        self.dicts.append(d)
        self.keys.append(key)
        self.values.append(value)
        self.checks.extend(zip(lines, descriptions))
        self.ends.append(len(self.checks))

    def source(self) -> list[str]:
        n = self.names
        head = f"if not _all(map(_is, map(_dict_get, {n['dicts']}, {n['keys']}, _absent), {n['values']})):"
        return [head, *(f"  {line}" for line, _ in self.checks)]

    def split_source(self, builder: PrologueBuilder, gated: set[int]) -> list[str]:
        """As ``source``, with the reads from the dicts ``gated`` (ids) tested only when the version gate of
        module state failed (``_gate_ok``, see ``_ModuleChecks.gated_source``)."""
        out = []
        for is_gated in (True, False):
            picked = [i for i, d in enumerate(self.dicts) if (id(d) in gated) is is_gated]
            if not picked:
                continue
            c = builder.constant
            dicts = c([self.dicts[i] for i in picked], "_read_dicts")
            keys = c([self.keys[i] for i in picked], "_read_keys")
            values = c([self.values[i] for i in picked], "_read_values")
            condition = "not _gate_ok and not _all" if is_gated else "not _all"
            out.append(f"if {condition}(map(_is, map(_dict_get, {dicts}, {keys}, _absent), {values})):")
            for i in picked:
                out.extend(f"  {line}" for line, _ in self.checks[self.ends[i - 1] if i else 0 : self.ends[i]])
        return out


# up to this many tensors, the checks before the C++ guard are inline code; beyond, loops over a tuple
_INLINE_PRECHECKS = 8


def _guard_sees_autocast(tensors) -> bool:
    """Whether a tensor guard built now over ``tensors`` (examples of a call made with autocast off) fails when autocast
    is on for any device type a trace's autocast rules apply to (``autocast.autocast_policy``: cpu, and cuda where
    this torch has it).

    The guard compares each tensor's dispatch keys, as the thread's dispatch state includes and excludes them, with
    those seen when it was built. Autocast for a device type is on exactly when that type's autocast key is not
    excluded, and a tensor of that device type carries the key: so one such tensor among ``tensors`` makes the guard
    fail whenever that autocast is turned on."""
    try:
        if any_autocast_enabled():
            return False
        keys = torch._C.DispatchKey
        needed = [keys.AutocastCPU] + ([keys.AutocastCUDA] if torch.backends.cuda.is_built() else [])
        sets = [torch._C._dispatch_keys(t) for t in tensors]
        return all(any(ks.has(key) for ks in sets) for key in needed)
    except Exception:  # pragma: no cover - a changed private API: the prologue checks autocast itself
        return False


def _odd_inputs(tensors) -> bool:
    return any(_odd_input(t) for t in tensors)


def _lines_printer(bsym, printer):
    return list(bsym.args[0])


_prologue_code = Symbol("prologue_code", None, id="prologue_code", is_prim=True, python_printer=_lines_printer)


@dataclass
class PrologueBuilder:
    """Accumulates a prologue's checks and unpacking as Python lines."""

    trace: TraceCtx = field(default_factory=lambda: TraceCtx("prologue"))
    checks: bool = True
    lines: list[str] = field(default_factory=list)
    guarded: list = field(default_factory=list)
    # the trace depends on the inputs' layout (strides, storage offsets) and, when it updates an input in
    # place, on which inputs share storage: both become checks
    check_layout: bool = False
    check_offsets: bool = False
    distinct_storages: frozenset = frozenset()  # the argument expressions whose storages must stay distinct
    # what each check guards, in the user's words, by line index (for the recompilation warning)
    descriptions: dict[int, str] = field(default_factory=dict)
    size_env: Any = None  # the trace's symbolic sizes (thunder.core.symbolic.SizeEnv), if any
    # the modules whose training flag, hooks, forward and submodules one line checks (see check_module)
    modules: _ModuleChecks | None = None
    # checks of immutable values read from dicts, behind one identity test (see dict_read)
    identity: _IdentityChecks | None = None
    param_names: set = field(default_factory=set)  # the function's parameters (the prologue's own locals avoid them)
    # parameter name -> the name the generated checks read it under (see parameter_locals; missing: the same)
    param_locals: dict = field(default_factory=dict)
    # (the user's signature as a def's parameters, the arguments passing them on) when some parameter is renamed
    _forward: tuple | None = None
    gate: str | None = None  # the constant holding the version tags of the last call that passed (see _ModuleChecks)
    # line index -> (local name, module, "_parameters" or "_buffers", key) of the reads of module tensors (read_state)
    state_reads: dict = field(default_factory=dict)
    # (line index, grad mode) of the line checking grad mode and that autocast is off, when it checks both; and
    # whether the tensor guard sees autocast being turned on (then that line checks grad mode only, see build)
    _grad_and_autocast_line: tuple | None = None
    _guard_sees_autocast: bool = False

    def constant(self, value: Any, prefix: str) -> str:
        return self.trace.add_constant(value, prefix)

    def emit(self, *lines: str) -> None:
        self.lines.extend(lines)

    def read_state(self, name: str, expr: str, source: tuple | None = None) -> None:
        """``name = expr``: a module's parameter or buffer the computation takes. ``source``: ``(module expression,
        module, "_parameters" or "_buffers", key)`` when ``expr`` reads it from that dict of the module (behind the
        version gate, such reads become one C loop, see ``_state_reads_source``)."""
        if source is not None and self.trace.constants.get(source[0]) is source[1]:
            self.state_reads[len(self.lines)] = (name, *source[1:])
        self.lines.append(f"{name} = {expr}")

    def fail_unless(self, condition: str, what: str | None = None) -> None:
        if self.checks:
            if what is not None:
                self.descriptions[len(self.lines)] = what
            self.lines.append(f"if not ({condition}): return MISS")

    def fail_if(self, condition: str, what: str | None = None) -> None:
        if self.checks:
            if what is not None:
                self.descriptions[len(self.lines)] = what
            self.lines.append(f"if {condition}: return MISS")

    @contextlib.contextmanager
    def dict_read(self, d: dict, key: str, value: Any):
        """The checks emitted inside run only when ``d[key]`` is no longer ``value`` itself (see _IdentityChecks).

        For a value read from a dict whose check passes whenever the very same object is still there: immutable
        data, or anything checked by identity only.
        """
        if not self.checks or key not in d or d[key] is not value:
            yield
            return
        lines, self.lines = self.lines, []
        descriptions, self.descriptions = self.descriptions, {}
        try:
            yield
        finally:
            emitted, emitted_what = self.lines, self.descriptions
            self.lines, self.descriptions = lines, descriptions
        group = self.identity
        if group is None:
            group = self.identity = _IdentityChecks(self, len(self.lines))
            self.descriptions[group.line] = "module attributes or globals"
            self.lines.append("")  # filled in by build()
        group.add(d, key, value, emitted, [emitted_what.get(i) for i in range(len(emitted))])

    def check_tensor(self, expr: str, proxy: TensorProxy, example: torch.Tensor | None = None) -> None:
        """Checks the tensor at ``expr`` has ``proxy``'s metadata (one C++ guard for all, when available)."""
        if not self.checks:
            return
        self.guarded.append((expr, proxy, example))

    def _local(self, name: str) -> str:
        """A name for a local variable of the prologue that no parameter of the function has."""
        while name in self.param_names:
            name = "_" + name
        return name

    def _emit_tensor_checks(self) -> None:
        if not self.guarded:
            return
        # the same tensor given twice is checked once, plus an identity check (aliasing is specialised on)
        first_expr: dict[int, str] = {}
        unique = []
        for expr, proxy, example in self.guarded:
            if example is not None and id(example) in first_expr:
                self.lines.append(f"if {expr} is not {first_expr[id(example)]}: return MISS")
                continue
            if example is not None:
                first_expr[id(example)] = expr
            unique.append((expr, proxy, example))
        examples = [ex for _, _, ex in unique]
        known = all(ex is not None for ex in examples)
        dynamic = [tuple(is_symbolic(s) for s in proxy.shape) for _, proxy, _ in unique]
        # the strides of a tensor with symbolic sizes are symbolic: such inputs are checked to be contiguous (their
        # strides follow from their sizes; the tracer specialised the sizes of the others it read the layout of)
        contiguity = [
            f"if not {expr}.is_contiguous(): return MISS"
            for i, (expr, _, ex) in enumerate(unique)
            if self.check_layout and any(dynamic[i])
        ]
        layout_by_contiguity = bool(contiguity)
        guard = _make_tensor_guard(examples, self.check_layout, dynamic) if known else None
        if guard is not None:
            self._guard_sees_autocast = _guard_sees_autocast(examples)
            name = self.constant(guard, "_tensor_guard")
            exprs = ", ".join(expr for expr, _, _ in unique)
            # the C++ guard rejects an object whose type is not the traced one before reading it, but a nested
            # tensor (whose type is Tensor) ends the process there: every input's is_nested is read first, and
            # a nested input, or one without is_nested (not a tensor), goes to _odd_inputs: a miss or a clear error
            self.trace.constants["_odd_inputs"] = _odd_inputs
            nested = self._local("_any_nested")
            if len(unique) <= _INLINE_PRECHECKS:  # a few tensors: inline checks (the least time per call)
                read_nested = " or ".join(f"{e}.is_nested" for e, _, _ in unique)
                odd = f"_odd_inputs(({exprs},))"
                call = f"{name}.check({exprs})"
            else:  # many tensors (a model's parameters): C loops over a tuple of them (short source, fast to compile)
                self.trace.constants["_is_nested"] = operator.attrgetter("is_nested")
                local = self._local("_tensors")
                self.lines.append(f"{local} = ({exprs},)")
                read_nested = f"any(map(_is_nested, {local}))"
                odd, call = f"_odd_inputs({local})", f"{name}.check(*{local})"
            self.lines += ["try:", f"  {nested} = {read_nested}", "except Exception:", f"  {nested} = True"]
            check = f"if ({nested} and {odd}) or not {call}: return MISS"
            self.descriptions[len(self.lines)] = "the tensors " + ", ".join(e for e, _, _ in unique)
            self._tensor_line = (len(self.lines), unique)
            self.lines.append(check)
        else:
            for expr, proxy, ex in unique:
                self._check_tensor_python(expr, proxy)
                if self.check_layout and ex is not None and not layout_by_contiguity:
                    self.lines.append(f"if {expr}.stride() != {tuple(ex.stride())!r}: return MISS")
        self.lines.extend(contiguity)
        if self.check_offsets and known:
            for expr, _, ex in unique:
                self.lines.append(f"if {expr}.storage_offset() != {ex.storage_offset()}: return MISS")
        args = [(expr, ex) for expr, _, ex in unique if expr in self.distinct_storages and ex is not None]
        if len(args) > 1:
            # as many separate storages as when traced: a call passing aliased tensors needs its own trace
            count = len({ex.untyped_storage().data_ptr() for _, ex in args})
            exprs = ", ".join(f"{expr}.untyped_storage().data_ptr()" for expr, _ in args)
            self.lines.append(f"if len({{{exprs}}}) != {count}: return MISS")

    def _emit_size_checks(self) -> None:
        """The symbolic sizes read from the inputs, and the relations among them the trace relied on."""
        env = self.size_env
        if env is None or not env.order:
            return
        for p in env.order:
            self.lines.append(f"{size_local(p)} = {p.source}")
        conditions = env.guards(size_local)
        self.trace.constants["math"] = math
        if self.checks and conditions:
            self.descriptions[len(self.lines)] = "the sizes " + ", ".join(p.source for p in env.order)
            self.lines.append(f"if not ({' and '.join(conditions)}): return MISS")

    def _check_tensor_python(self, expr: str, proxy: TensorProxy) -> None:
        self.lines.append(f"if not ({self._tensor_condition(expr, proxy)}): return MISS")

    def _tensor_condition(self, expr: str, proxy: TensorProxy) -> str:
        dtype = self.constant(proxy.dtype.torch_dtype, "_dtype")
        device = self.constant(proxy.device._torch_device, "_device")
        if any(is_symbolic(s) for s in proxy.shape):  # only the numbers are checked here (symbols: _emit_size_checks)
            sizes = " and ".join(
                [f"{expr}.ndim == {len(proxy.shape)}"]
                + [f"{expr}.shape[{d}] == {hint(s)}" for d, s in enumerate(proxy.shape) if not is_symbolic(s)]
            )
        else:
            sizes = f"{expr}.shape == {hints(proxy.shape)!r}"
        return (
            f"isinstance({expr}, Tensor) and {expr}.dtype is {dtype} and {sizes} "
            f"and {expr}.device == {device} and {expr}.requires_grad is {proxy.requires_grad}"
        )

    def check_module(self, module: torch.nn.Module, expr: str, what: str) -> None:
        """Checks that ``module`` keeps its training flag, hooks, submodules and ``forward``.

        Modules without hooks share one line of C-speed checks (``_ModuleChecks``): the source of a
        model's prologue, and the time to compile and run it, then grow little with its depth.
        """
        if not self.checks:
            return
        d = module.__dict__
        state = tuple(d.get(key, _ABSENT) for key in _MODULE_STATE_KEYS)
        if any(v is _ABSENT for v in state) or any(state[1:]) or "forward" in d:
            self._check_module_line(module, expr, what)
            return
        checks = self.modules
        if checks is None:
            checks = self.modules = _ModuleChecks(self, len(self.lines))
            self.descriptions[checks.line] = "the modules' training flags, submodules, hooks or forward"
            self.lines.append(checks.source())
        checks.add(module, state, expr, what)

    def _check_module_line(self, module: torch.nn.Module, expr: str, what: str) -> None:
        d = module.__dict__
        cond = [f"type({expr}) is not {self.constant(type(module), '_module_class')}"]
        cond.append(f"{expr}.training is not {module.training}")
        if module._modules:
            cond.append(f"{expr}._modules != {self.constant(dict(module._modules), '_submodules')}")
        for hooks in _MODULE_STATE_KEYS[1:]:
            current = d.get(hooks)
            if current:
                cond.append(f"{expr}.{hooks}.keys() != {self.constant(frozenset(current), '_hook_ids')}")
            else:
                cond.append(f"{expr}.{hooks}")
        if "forward" not in d:
            cond.append(f"'forward' in {expr}.__dict__")
        self.fail_if(" or ".join(cond), what)

    def check_value(self, expr: str, value, what: str | None = None) -> None:
        """A Python value the trace specialised on: same type and equal (identity for other objects)."""
        if not self.checks:
            return
        what = what if what is not None else expr
        t = type(value)
        if value is None or t is bool:
            self.fail_if(f"{expr} is not {value!r}", what)
        elif t in (int, float, complex, str):
            if t is float and value != value:  # NaN
                self.fail_if(f"type({expr}) is not float or {expr} == {expr}", what)
            elif t is float and value == 0.0:  # -0.0 == 0.0, but 1 / -0.0 is -inf: the sign is checked too
                self.trace.constants["_copysign"] = math.copysign
                sign = math.copysign(1.0, value)
                self.fail_if(f"type({expr}) is not float or {expr} != 0.0 or _copysign(1.0, {expr}) != {sign}", what)
            else:
                literal = (
                    repr(value) if t is not float or value not in (float("inf"), float("-inf")) else f"float('{value}')"
                )
                self.fail_if(f"type({expr}) is not {t.__name__} or {expr} != {literal}", what)
        elif isinstance(value, torch.device):
            self.fail_if(f"{expr} != {self.constant(value, '_device')}", what)
        elif t is torch.Size:  # compared by value: a new Size object with the same sizes is the same input
            self.fail_if(f"type({expr}) is not {self.constant(t, '_type')} or {expr} != {tuple(value)!r}", what)
        else:
            self.fail_if(f"{expr} is not {self.constant(value, '_obj')}", what)

    def check_grad_and_autocast(self, grad_enabled: bool) -> None:
        if not self.checks:
            return
        self.trace.constants["_is_grad_enabled"] = torch.is_grad_enabled
        self.trace.constants["_any_autocast_enabled"] = any_autocast_enabled
        autocast = any_autocast_enabled()
        if not autocast:
            self._grad_and_autocast_line = (len(self.lines), grad_enabled)
        self.lines.append(
            f"if _is_grad_enabled() is not {grad_enabled} or _any_autocast_enabled() is not {autocast}: return MISS"
        )
        if autocast:  # the trace applied this autocast policy: the same devices and dtypes must be on
            self.trace.constants["_autocast_state"] = autocast_state
            self.lines.append(f"if _autocast_state() != {self.constant(autocast_state(), '_autocast')}: return MISS")

    def build(
        self, signature: inspect.Signature, call: str, fn_name: str, computation, hit_counter: list | None = None
    ) -> TraceCtx:
        """The prologue trace: the user's signature, the checks, then ``return computation(...)``.

        ``hit_counter``: a one-element list whose item the prologue increments once the checks pass (the cache
        hit count, kept without a call into Python).
        """
        trace = self.trace
        trace.fn_name = "prologue"
        params, defaults = [], {}
        seen_kwonly = False
        for p in signature.parameters.values():
            if p.kind is p.VAR_POSITIONAL:
                params.append(f"*{p.name}")
                seen_kwonly = True
                continue
            if p.kind is p.VAR_KEYWORD:
                params.append(f"**{p.name}")
                continue
            if p.kind is p.KEYWORD_ONLY and not seen_kwonly:
                params.append("*")
                seen_kwonly = True
            if p.default is not p.empty:
                defaults[p.name] = p.default
                params.append(f"{p.name}={self.constant(p.default, '_default')}")
            else:
                params.append(p.name)
            if p.kind is p.POSITIONAL_ONLY and (
                not any(q.kind is q.POSITIONAL_ONLY for q in list(signature.parameters.values())[len(params) :])
            ):
                params.append("/")
        names = list(signature.parameters)
        local_names = [self.param_locals.get(n, n) for n in names]
        if local_names != names:
            # a parameter would shadow a name the checks read: the prologue takes every parameter positionally
            # under its local name (``*args`` as a tuple, ``**kwargs`` as a dict) behind a forwarder that has the
            # user's signature (see python_callable)
            trace.args = [*local_names, "/"]
            self._forward = (params, names)
        else:  # the common case: the prologue has the user's signature itself
            trace.args = params
            self._forward = None
        self.param_names = set(local_names)
        self._emit_tensor_checks()
        self._emit_size_checks()
        if self._grad_and_autocast_line is not None and self._guard_sees_autocast:
            # autocast off (as when traced) is checked by the tensor guard: a call with it on fails there
            index, grad_enabled = self._grad_and_autocast_line
            self.lines[index] = f"if _is_grad_enabled() is not {grad_enabled}: return MISS"
        trace.constants["MISS"] = MISS
        trace.constants["computation"] = computation
        trace.extra_imports = ["from torch import Tensor"]
        count = []
        if hit_counter is not None:
            count = [f"{self.constant(hit_counter, '_hits')}[0] += 1"]
        trace.bound_symbols = [
            _prologue_code.bind(tuple(self._rendered_lines() + count + [f"return {call}"]), output=None)
        ]
        trace.scopes = [trace.bound_symbols]
        trace.user_fn_name = fn_name
        self._call = call
        return trace

    def python_callable(self, trace: TraceCtx):
        """``trace`` (this builder's prologue, or a variant of it) compiled, callable with the user's arguments.

        When a parameter is read under another name (see ``parameter_locals``), a generated forwarder with the
        user's signature calls the compiled prologue; it shares its globals (``computation`` swapped there
        reaches it).
        """
        fn = trace.python_callable()
        if self._forward is None:
            return fn
        params, names = self._forward
        namespace = fn.__globals__
        body = "_prologue_body"
        while body in names:  # (the forwarder's parameters must not shadow the prologue it calls)
            body = "_" + body
        namespace[body] = fn
        src = f"def {trace.fn_name}({', '.join(params)}):\n  return {body}({', '.join(names)})\n"
        filename = f"thunder.{trace.fn_name}_forwarder_{id(fn):x}"
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        exec(compile(src, filename, "exec"), namespace)  # noqa: S102 - generated above from the signature
        forwarder = namespace[trace.fn_name]
        forwarder.__thunder_trace__ = trace
        return forwarder

    def _rendered_lines(self) -> list[str]:
        group, modules = self.identity, self.modules
        dict_version = dict_version_function() if modules is not None else None
        if dict_version is None:
            if group is None:
                return list(self.lines)
            return [*self.lines[: group.line], *group.source(), *self.lines[group.line + 1 :]]
        # the module checks behind a gate of dict version tags; the attribute reads from those modules'
        # __dict__s behind the same gate when they come after it (they read its _gate_ok)
        lines = list(self.lines)
        reads = self._state_reads_source({id(d) for d in modules.dicts})
        if reads is not None:  # the first read becomes the whole block, the others go
            (first, *others), block = reads
            lines[first] = block
            for i in others:
                lines[i] = None
        out = [*lines[: modules.line], *modules.gated_source(self, dict_version)]
        rest = lines[modules.line + 1 :]
        if group is not None and group.line > modules.line:
            at = group.line - modules.line - 1
            gated = {id(d) for d in modules.dicts}
            rest = [*rest[:at], *group.split_source(self, gated), *rest[at + 1 :]]
        elif group is not None:
            out = [*lines[: group.line], *group.source(), *lines[group.line + 1 : modules.line], *out[modules.line :]]
        # every check passed: the tags read before them describe a state that passes
        out = [*out, *rest, f"if not _gate_ok: {self.gate}[0] = _versions"]
        if reads is not None:
            out = [line for item in out if item is not None for line in (item if type(item) is list else [item])]
        return out

    def _state_reads_source(self, gated: set[int]) -> tuple[list[int], list[str]] | None:
        """The reads of parameters and buffers from gated modules (``gated``: the ids of their ``__dict__``s) as
        one block: ``(the indices of the lines it replaces, its lines)``, or None when there are none.

        While the gate holds, each module's ``__dict__`` maps ``_parameters`` and ``_buffers`` to the very objects it
        did at the last call that passed, and a check behind the gate makes those the dicts the module had when
        traced (replacing a module's ``_parameters`` dict is then a miss): the tensors are read from those dicts, by
        key, in one C loop. Otherwise they are read through the modules as written.
        """
        picked = {i: r for i, r in self.state_reads.items() if id(r[1].__dict__) in gated}
        if not picked:
            return None
        order = sorted(picked)
        c = self.constant
        constants = self.trace.constants
        constants["_getitem"], constants["_all"], constants["_is"] = operator.getitem, all, operator.is_
        constants["_dict_get"], constants["_absent"] = dict.get, itertools.repeat(_ABSENT)
        owners = c([picked[i][1].__dict__ for i in order], "_state_owners")
        kinds = c([picked[i][2] for i in order], "_state_kinds")
        dicts = c([getattr(picked[i][1], picked[i][2]) for i in order], "_state_dicts")
        keys = c([picked[i][3] for i in order], "_state_keys")
        names = "".join(f"{picked[i][0]}, " for i in order)
        block = [
            f"if not _gate_ok and not _all(map(_is, map(_dict_get, {owners}, {kinds}, _absent), {dicts})): return MISS",
            "if _gate_ok:",
            f"  {names}= map(_getitem, {dicts}, {keys})",
            "else:",
            *(f"  {self.lines[i]}" for i in order),
        ]
        return order, block

    def build_unchecked(self):
        """The prologue without its checks: unpacks and calls (for the call that traced, when tracing changed
        module attributes or globals the checks describe as they were before the call)."""
        trace = copy.copy(self.trace)
        identity_line = self.identity.line if self.identity is not None else -1
        lines = [line for i, line in enumerate(self.lines) if not line.endswith("return MISS") and i != identity_line]
        trace.bound_symbols = [_prologue_code.bind(tuple(lines + [f"return {self._call}"]), output=None)]
        trace.scopes = [trace.bound_symbols]
        trace._python_cache = None
        return self.python_callable(trace)

    def first_failing_check(self, *args, **kwargs) -> str | None:
        """Which check rejects these inputs, in the user's words (for the recompilation warning)."""
        trace = copy.copy(self.trace)
        lines = []
        tensor_line = getattr(self, "_tensor_line", None)
        for i, line in enumerate(self.lines):
            if tensor_line is not None and i == tensor_line[0]:  # one check per tensor, to name the one that changed
                for expr, proxy, _ in tensor_line[1]:
                    lines.append(f"if not ({self._tensor_condition(expr, proxy)}): return {f'the tensor {expr}'!r}")
                continue
            if self.modules is not None and i == self.modules.line:  # one check per module, to name it
                lines.extend(self.modules.separate_checks())
                continue
            if self.identity is not None and i == self.identity.line:  # every check behind the identity test
                for check, what in self.identity.checks:
                    what = what if what is not None else check[3 : -len(": return MISS")]
                    lines.append(check[: -len("MISS")] + repr(what))
                continue
            folded = self._grad_and_autocast_line if self._guard_sees_autocast else None
            if folded is not None and i == folded[0]:  # (the tensor guard's part of it, named apart)
                line = f"if _is_grad_enabled() is not {folded[1]} or _any_autocast_enabled() is not False: return MISS"
            if line.endswith("return MISS"):
                what = self.descriptions.get(i, line[3 : -len(": return MISS")])
                line = line[: -len("MISS")] + repr(what)
            lines.append(line)
        trace.bound_symbols = [_prologue_code.bind(tuple(lines + ["return None"]), output=None)]
        trace.scopes = [trace.bound_symbols]
        trace._python_cache = None
        try:
            what = self.python_callable(trace)(*args, **kwargs)
        except Exception:
            return None
        return self._in_user_names(what) if what is not None else None

    def _in_user_names(self, text: str) -> str:
        """``text`` (a check's description) with the parameters read under other names called by their own."""
        for name, local in self.param_locals.items():
            if local != name:
                text = re.sub(rf"\b{re.escape(local)}\b", name, text)
        return text
