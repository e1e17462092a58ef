"""Tracing a whole program: inputs to proxies, module state swapped for proxies, the user's function
run under the tracer, in-place updates of inputs written back, outputs collected, the prologue built.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
import types
from dataclasses import dataclass
from typing import Any

import torch

from thunder.core import prims, pytree
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbolic import SizeEnv, specialize
from thunder.core.trace import TraceCtx, get_tracectx, tracectx
from thunder.tracing import guards
from thunder.tracing.errors import TracingError, data_dependent_size_error
from thunder.tracing.post_call import PostCall, emit_writes, unalias_outputs
from thunder.tracing.prologue import PrologueBuilder
from thunder.tracing.returned_functions import with_returned_closures
from thunder.tracing.script import inline_script_functions
from thunder.tracing.tracer import (
    Tracer,
    TracingTensor,
    _current_tracer,
    _TracingMode,
    alias_of_storage,
    seed_storage,
    set_input_layout,
    unwrap,
    view_of,
)

__all__ = ["TracedProgram", "trace_program"]


@dataclass(slots=True)
class _TensorInput:
    expr: str  # how the prologue reads it
    proxy: TensorProxy
    wrapper: TracingTensor
    is_module_state: bool
    container: dict | None = None  # module state: the dict it lives in, for swapping
    key: str | None = None
    original: torch.Tensor | None = None
    example: torch.Tensor | None = None  # the argument tensor of the call traced


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
    def __init__(
        self, trace: TraceCtx, prologue: PrologueBuilder, share_repeated: bool = False, dynamic=None, size_env=None
    ):
        self.trace = trace
        # dynamic(expr, tensor) -> the dimensions of an argument tensor traced as symbols (None: all numbers)
        self.dynamic = dynamic
        self.size_env = size_env
        self.prologue = prologue
        self.share_repeated = share_repeated
        self.repeated = False  # some tensor argument was given twice
        self.tensors: list[_TensorInput] = []
        self.by_id: dict[int, TracingTensor] = {}
        self.state_reads: list = []  # (local name, expression, proxy, example) for module tensors
        self.shadows: dict = {}  # id(user's module) -> the shadow the traced code runs on
        self.guarded_modules: set[int] = set()
        self.first_read: dict[int, str] = {}  # id(tensor) -> where the prologue reads it first
        self.module_names: dict[str, str] = {}  # prologue constant -> the module's name for messages
        self.attribute_snapshots: dict[int, dict] = {}
        self.objects: list[_ObjectArgument] = []  # arguments holding tensors inside Python objects
        self.object_attributes: set[tuple[int, str]] = set()  # (id(module), attribute) held as such objects

    @property
    def originals(self) -> list:
        return self.shadows.get("_originals", [])

    # user arguments: returns what user code sees
    def argument(self, value, expr: str, name: str):
        pb = self.prologue
        if isinstance(value, TracingTensor):
            raise TracingError(
                "a thunder stand-in tensor was passed to a jitted function; don't jit inside a jitted function"
            )
        if isinstance(value, torch.Tensor):
            if value.is_nested or value.layout is not torch.strided:
                raise TypeError(
                    f"thunder.jit does not support {'nested' if value.is_nested else str(value.layout)} tensors "
                    f"as inputs (argument {expr}); pass a regular (strided) tensor"
                )
            prior = self.by_id.get(id(value))
            self.repeated = self.repeated or prior is not None
            if prior is not None and self.share_repeated:  # one stand-in, so updates reach both names
                pb.check_tensor(expr, prior._tt_value, value)
                self.tensors.append(_TensorInput(expr, prior._tt_value, prior, False))
                return prior
            proxy = TensorProxy(
                self.trace.add_name(name),
                shape=self._shape(expr, value),
                dtype=value.dtype,
                device=value.device,
                requires_grad=value.requires_grad,
            )
            pb.check_tensor(expr, proxy, value)
            wrapper = TracingTensor(proxy)
            set_input_layout(wrapper, value)
            self.by_id.setdefault(id(value), wrapper)
            self.first_read.setdefault(id(value), expr)
            if isinstance(value, torch.nn.Parameter):
                wrapper._is_param = True
            self.tensors.append(_TensorInput(expr, proxy, wrapper, False, example=value))
            return wrapper
        t = type(value)
        if t is tuple or t is list or (isinstance(value, tuple) and hasattr(value, "_fields")):
            pb.fail_unless(f"type({expr}) is {pb.constant(t, '_type')} and len({expr}) == {len(value)}")
            items = [self.argument(v, f"{expr}[{i}]", f"{name}_{i}") for i, v in enumerate(value)]
            if t is list:
                return self._track_mutable(expr, value, items)
            return t(*items) if hasattr(value, "_fields") else t(items)
        if t is dict and all(isinstance(k, str) for k in value):
            keys = pb.constant(frozenset(value), "_keys")
            pb.fail_unless(f"type({expr}) is dict and {expr}.keys() == {keys}")
            wrapped = {k: self.argument(v, f"{expr}[{k!r}]", f"{name}_{_sanitize(k)}") for k, v in value.items()}
            return self._track_mutable(expr, value, wrapped)
        if _is_object_argument(value):
            return self.object_argument(value, expr, name)
        if isinstance(value, torch.nn.Module):
            pb.check_value(expr, value)
            return self.module_state(value, pb.constant(value, "_module"), f"t_{name}_" if name else "t_")
        if type(value).__module__ == "numpy" and hasattr(value, "__array__") and hasattr(value, "dtype"):
            raise TypeError(
                f"argument {expr} is a NumPy {type(value).__name__}; thunder.jit takes tensors: "
                "pass torch.from_numpy(...) (or torch.as_tensor) instead"
            )
        pb.check_value(expr, value)
        return value

    def _shape(self, expr: str, value: torch.Tensor) -> tuple:
        """The argument's sizes as the trace sees them: numbers, or symbols for its dynamic dimensions."""
        dims = self.dynamic(expr, value) if self.dynamic is not None else None
        if not dims:
            return tuple(value.shape)
        shape = list(value.shape)
        for d in dims:
            shape[d] = self.size_env.size(shape[d], f"{expr}.shape[{d}]")
        return tuple(shape)

    def _track_mutable(self, expr: str, value, wrapped):
        """A list or dict argument: what the traced code changes in it is written into the caller's (as eager)."""
        try:
            spec = pytree.tree_flatten(value)[1]
            leaves = pytree.tree_leaves(wrapped)
        except RecursionError:
            return wrapped
        self.objects.append(_ObjectArgument(expr, value, wrapped, spec, leaves))
        return wrapped

    def object_argument(self, value, expr: str, name: str):
        """An object holding tensors: the prologue flattens it (one pytree), checks its structure and leaves."""
        pb = self.prologue
        try:
            leaves, spec = pytree.tree_flatten(value)
        except RecursionError:  # an object graph with a cycle: specialised on its identity
            pb.check_value(expr, value)
            return value
        local = f"_flat{len(self.objects)}"
        pb.trace.constants["_tree_flatten"] = pytree.tree_flatten
        pb.emit(f"{local}, {local}_spec = _tree_flatten({expr})")
        pb.fail_if(f"{local}_spec != {pb.constant(spec, '_treespec')}", f"the structure of {expr}")
        wrapped = [self.argument(leaf, f"{local}[{i}]", f"{name}_{i}") for i, leaf in enumerate(leaves)]
        copy = pytree.tree_unflatten(spec, wrapped)
        self.objects.append(_ObjectArgument(expr, value, copy, spec, wrapped))
        return copy

    def module_state(self, module: torch.nn.Module, module_expr: str, prefix: str) -> torch.nn.Module:
        """A shadow of ``module`` (recursively) whose parameters, buffers and tensor attributes are stand-ins.

        The user's module is never modified while tracing (another thread may be running it): the
        traced code runs on shallow copies of the modules that share everything else with them. The
        prologue checks what the trace specialised on: the module tree, hooks, training flags and
        attributes of any type.
        """
        pb = self.prologue
        shadows = self.shadows
        root = _shadow(module, shadows)
        version_checked = False
        holds: dict[int, bool] = {}  # _holds_tensors of objects many modules share (a model's config)
        for mname, m in module.named_modules():
            if id(m) in self.guarded_modules:
                continue
            self.guarded_modules.add(id(m))
            guards.track_module(m)
            if not version_checked:
                version_checked = True
                pb.trace.constants["_structure_version"] = guards.structure_version()
                pb.fail_if(
                    f"_structure_version[0] != {guards.structure_version()[0]}",
                    "the module tree (a submodule, parameter or buffer was registered or replaced)",
                )
                # global module hooks (torch.nn.modules.module.register_module_forward_hook and friends)
                from torch.nn.modules import module as mm

                for hooks in _GLOBAL_HOOK_DICTS:
                    current = getattr(mm, hooks, None)
                    if current is None:
                        continue
                    expr = pb.constant(current, "_global_hooks")
                    if current:
                        pb.fail_if(f"{expr}.keys() != {pb.constant(frozenset(current), '_hook_ids')}", hooks)
                    else:
                        pb.fail_if(expr, hooks)
            for hooks in ("_backward_hooks", "_backward_pre_hooks"):
                if m.__dict__.get(hooks):
                    raise TracingError(
                        f"thunder.jit does not support module backward hooks (register_full_backward_hook, "
                        f"register_full_backward_pre_hook) on {type(m).__name__} {mname or '(the root module)'}; "
                        "register a hook on the output tensor after the call instead"
                    )
            shadow = shadows[id(m)]
            m_expr = pb.constant(m, "_module") if mname else module_expr
            qual = f"{prefix[:-1] if mname else 'self'}{'.' + mname if mname else ''}"
            self.module_names[m_expr] = qual
            pb.check_module(m, m_expr, f"{qual} (training flag, submodules, hooks or forward)")
            d = m.__dict__
            # attributes of any type the forward may read are specialised on
            for attr, value in d.items():
                if attr in _MODULE_INTERNALS or attr in _UNGUARDED_MODULE_ATTRIBUTES:
                    continue
                expr = f"{m_expr}.{attr}" if attr.isidentifier() else f"{m_expr}.__dict__[{attr!r}]"
                if type(value) in (list, dict, set):
                    self.attribute_snapshots.setdefault(id(m), {})[attr] = guards._plain_copy(value)
                if isinstance(value, torch.Tensor) and not isinstance(value, TracingTensor):
                    # a plain tensor attribute is read at call time, like a buffer
                    self._state_tensor(m, shadow.__dict__, attr, f"{m_expr}.__dict__.get({attr!r})", prefix, mname)
                    continue
                held = holds.get(id(value))
                if held is None:
                    held = holds[id(value)] = _holds_tensors(value)
                if held:
                    # tensors in a list, dict or object held by the module: inputs, like an argument's
                    copy = self.object_argument(value, f"{m_expr}.__dict__[{attr!r}]", _sanitize(f"{qual}_{attr}"))
                    if copy is not value:
                        shadow.__dict__[attr] = copy
                        self.object_attributes.add((id(m), attr))
                    continue
                guards.guard_value(pb, expr, value, f"{qual}.{attr}", read_from=(d, attr))
                if type(value) in (dict, list) and guards.is_plain(value):
                    # a container the forward may fill (timm's attention_bias_cache[str(device)] = ...): the traced
                    # code fills a copy, and the values it stored are written into the user's after each call
                    copy = guards._plain_copy(value)
                    shadow.__dict__[attr] = copy
                    self.object_attributes.add((id(m), attr))
                    self._track_mutable(f"{m_expr}.__dict__[{attr!r}]", value, copy)
            for kind in ("_parameters", "_buffers"):
                container = getattr(shadow, kind)
                for key, t in list(getattr(m, kind).items()):
                    if t is None:
                        continue
                    self._state_tensor(m, container, key, f"{m_expr}.{kind}[{key!r}]", prefix, mname, kind)
        return root

    def _state_tensor(self, m, container: dict, key: str, expr: str, prefix: str, mname: str, kind: str = "") -> None:
        t = container[key]
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
            set_input_layout(wrapper, t)
            if kind == "_parameters":
                wrapper._is_param = True
            self.by_id[id(t)] = wrapper
            self.first_read[id(t)] = expr
            self.tensors.append(_TensorInput(proxy.name, proxy, wrapper, True, container, key, t))
            self.state_reads.append((proxy.name, expr, proxy, t))
        else:
            # the same tensor in two places (tied weights): the trace relies on it staying tied
            self.prologue.fail_if(f"{expr} is not {self.first_read[id(t)]}", f"tied tensor {mname}.{key}")
            self.tensors.append(_TensorInput("", wrapper._thunder_proxy, wrapper, True, container, key, t))
        container[key] = wrapper

    def alias_overlapping(self) -> bool:
        """Distinct argument tensors sharing a storage become views of one input, the storage itself.

        An update through one then reaches the others, as in eager. Returns whether there were any.
        """
        groups: dict[int, list[tuple[_TensorInput, torch.Tensor]]] = {}
        for ti in self.tensors:
            value = ti.original if ti.is_module_state else ti.example
            if value is None or value.numel() == 0 or value.is_meta or not value.layout == torch.strided:
                continue
            ptr = value.untyped_storage().data_ptr()
            members = groups.setdefault(ptr, [])
            if all(m[1] is not value for m in members):
                members.append((ti, value))
        aliased = False
        for members in groups.values():
            if len(members) < 2 or any(ti.is_module_state for ti, _ in members):
                continue
            aliased = True
            first_ti, first = members[0]
            n = first.untyped_storage().nbytes() // first.element_size()
            storage = torch.as_strided(first, (n,), (1,), 0)
            proxy = TensorProxy(
                self.trace.add_name("storage"), shape=(n,), dtype=first.dtype, device=first.device, requires_grad=False
            )
            expr = f"torch.as_strided({first_ti.expr}, ({n},), (1,), 0)"
            self.prologue.check_tensor(expr, proxy, storage)
            root = TracingTensor(proxy)
            set_input_layout(root, storage)
            self.tensors.append(_TensorInput(expr, proxy, root, False, example=storage))
            for ti, value in members:
                alias_of_storage(ti.wrapper, root, value)
            seed_storage(root, [ti.wrapper for ti, _ in members])
        return aliased

    def restore(self) -> list[tuple[_TensorInput, Any]]:
        """Entries whose slot the program reassigned (the shadows are discarded; the user's module was untouched)."""
        reassigned = []
        for ti in self.tensors:
            if ti.container is not None:
                current = ti.container.get(ti.key)
                if current is not ti.wrapper:
                    reassigned.append((ti, current))
        return reassigned

    def apply_attribute_updates(self) -> bool:
        """Python attributes the traced code set on modules (flags, counters) are set on the user's modules.

        Returns whether any module attribute changed (the entry's checks then describe the state before the call).
        """
        changed = False
        for original, shadow in self.shadow_pairs():
            od, sd = original.__dict__, shadow.__dict__
            snapshots = self.attribute_snapshots.get(id(original), {})
            keys = [k for k, v in sd.items() if od.get(k, _ABSENT) is not v]  # (few: a C-speed first pass)
            if keys or len(od) != len(sd):
                keys.extend(k for k in od if k not in sd)
            keys.extend(k for k in snapshots if k not in keys)
            for key in keys:
                old, new = od.get(key, _ABSENT), sd.get(key, _ABSENT)
                if (id(original), key) in self.object_attributes:
                    continue  # updates of the objects inside are written back by the program's finish
                if key in _MODULE_INTERNALS and key in ("_parameters", "_buffers", "_modules"):
                    continue
                if isinstance(old, torch.Tensor) and isinstance(new, TracingTensor):
                    continue  # a tensor attribute read at call time; its in-place updates are in the program
                if new is old:
                    if guards.is_plain(new):
                        changed = changed or snapshots[key] != new
                    continue
                if isinstance(new, TracingTensor):
                    raise TracingError(
                        f"the traced code stored a tensor computed inside it as the module attribute {key!r}; "
                        "thunder cannot keep such a tensor between calls: return it, or register a buffer of "
                        "the same shape and update it in place"
                    )
                changed = True
                if new is _ABSENT:
                    del od[key]
                else:
                    od[key] = new
        return changed

    def shadow_pairs(self):
        for m in self.originals:
            yield m, self.shadows[id(m)]


_ABSENT = object()


def _holds_tensors(value) -> bool:
    """Whether ``value`` (a list, tuple, dict or plain object) has tensors among its pytree leaves."""
    t = type(value)
    if t not in (list, tuple, dict) and not pytree.is_registered(t):
        if isinstance(value, (torch.nn.Module, torch.Tensor)) or t.__module__ == "builtins":
            return False
        pytree.discover_nodes(value)
        if not pytree.is_registered(t):
            return False
    try:
        return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value))
    except RecursionError:
        return False


def _is_object_argument(value) -> bool:
    """A dataclass, ModelOutput, HF cache or user object with tensors inside (registered as a pytree node)."""
    t = type(value)
    if t in (tuple, list, dict) or isinstance(value, (torch.Tensor, torch.nn.Module)) or t.__module__ == "builtins":
        return False
    if not pytree.is_registered(t):
        pytree.discover_nodes(value)
    return pytree.is_registered(t) and t is not slice


_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOK_DICTS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_MODULE_INTERNALS = frozenset(torch.nn.Module().__dict__)


def _shadow(module: torch.nn.Module, shadows: dict) -> torch.nn.Module:
    """A shallow copy of ``module`` with its own parameter, buffer and submodule dicts (and shadowed submodules)."""
    s = shadows.get(id(module))
    if s is not None:
        return s
    s = object.__new__(type(module))
    s.__dict__.update(module.__dict__)
    shadows[id(module)] = s
    shadows.setdefault("_originals", []).append(module)
    s.__dict__["_parameters"] = dict(module._parameters)
    s.__dict__["_buffers"] = dict(module._buffers)
    s.__dict__["_modules"] = {k: (_shadow(c, shadows) if c is not None else None) for k, c in module._modules.items()}
    forward = s.__dict__.get("forward")
    if isinstance(forward, types.MethodType) and forward.__self__ is module:  # a monkeypatched bound forward
        s.__dict__["forward"] = types.MethodType(forward.__func__, s)
    return s


def _printable(x) -> bool:
    """Whether the output prints as the trace's return (tuples, lists, str-keyed dicts of tensors and scalars)."""
    t = type(x)
    if isinstance(x, (Proxy, TracingTensor)) or x is None or t in (bool, int, float, str, torch.SymInt, torch.SymFloat):
        return True
    if t is tuple or t is list:
        return all(_printable(y) for y in x)
    if t is dict:
        return all(type(k) is str and _printable(v) for k, v in x.items())
    return False


def _output_leaf(leaf):
    if isinstance(leaf, TracingTensor):
        return leaf._thunder_proxy
    if isinstance(leaf, torch.Tensor):
        raise TracingError(
            "the jitted function returned a tensor created outside of it (a global?); return it separately"
        )
    return leaf


class _ObjectArgument:
    """An argument holding tensors inside a Python object (HF cache, dataclass, user class).

    The traced code sees a rebuilt copy whose tensors are stand-ins; what it rebinds in that copy
    (``cache.keys = torch.cat(...)``, a flag) is written into the caller's object after every call.
    """

    def __init__(self, expr: str, original, copy, spec, wrapped_leaves: list):
        self.expr = expr
        self.original = original
        self.copy = copy
        self.spec = spec
        self.wrapped_leaves = wrapped_leaves
        self.post_spec = None
        self.keys = list(original) if type(original) is dict else None
        self.sources: list = []  # per leaf of the state after the call: ("pre", i), ("out", k) or ("const", v)


def _copy_outputs_holding_overwritten_inputs(result, tensors) -> None:
    """An output whose value is an input's value before an in-place update (``v.copy_(b); b.add_(1);
    return v``) gets a copy taken before the update is written back into the caller's tensor, or it
    would come back as that very tensor, updated."""
    overwritten = {ti.proxy.name for ti in tensors if ti.wrapper._thunder_proxy is not ti.proxy}
    if not overwritten:
        return
    own = {id(ti.wrapper) for ti in tensors}
    for leaf in pytree.tree_leaves(result):
        if not isinstance(leaf, TracingTensor):
            continue
        view = view_of(leaf)
        root = leaf if view is None else view[0]  # a view re-derives from its root
        if id(root) not in own and root._tt_value.name in overwritten:
            root._tt_value = prims.clone.record(get_tracectx(), (root._tt_value,), {})
            root._tt_version += 1


def _plan_object_updates(objects: list[_ObjectArgument], extra_outputs: list) -> list[_ObjectArgument]:
    """For each object argument the traced code changed, where each value of its new state comes from."""
    changed = []
    for obj in objects:
        pytree.discover_nodes(obj.copy)
        post_leaves, post_spec = pytree.tree_flatten(obj.copy)
        pre_index = {id(w): i for i, w in enumerate(obj.wrapped_leaves) if isinstance(w, TracingTensor)}
        same = post_spec == obj.spec and all(a is b for a, b in zip(post_leaves, obj.wrapped_leaves))
        if same:
            continue
        sources = []
        for leaf in post_leaves:
            if isinstance(leaf, TracingTensor) and id(leaf) in pre_index:
                sources.append(("pre", pre_index[id(leaf)]))  # in-place updates reach the caller's tensor
            elif isinstance(leaf, TracingTensor):
                sources.append(("out", len(extra_outputs)))
                extra_outputs.append(leaf._thunder_proxy)
            elif isinstance(leaf, torch.Tensor):
                raise TracingError(
                    f"the traced code stored a tensor created outside of it into the argument {obj.expr}; "
                    "thunder cannot keep such a tensor between calls"
                )
            else:
                sources.append(("const", leaf))
        obj.post_spec, obj.sources = post_spec, sources
        changed.append(obj)
    return changed


def _assign_into(dst, src) -> None:
    """Makes the caller's object ``dst`` hold ``src``'s state, updating nested objects and lists in place."""
    if isinstance(dst, list):
        for i, v in enumerate(src):
            if i < len(dst) and _same_object_kind(dst[i], v):
                _assign_into(dst[i], v)
            elif i < len(dst):
                dst[i] = v
            else:
                dst.append(v)
        del dst[len(src) :]
        return
    if type(dst) is dict:
        for k in list(dst):
            if k not in src:
                del dst[k]
        for k, v in src.items():
            if k in dst and _same_object_kind(dst[k], v):
                _assign_into(dst[k], v)
            else:
                dst[k] = v
        return
    d = dst.__dict__
    for k in list(d):
        if k not in src.__dict__:
            del d[k]
    for k, v in src.__dict__.items():
        old = d.get(k, None)
        if old is not None and _same_object_kind(old, v):
            _assign_into(old, v)
        else:
            d[k] = v


def _same_object_kind(a, b) -> bool:
    t = type(a)
    if t is not type(b):
        return False
    return t is list or t is dict or (pytree.is_registered(t) and not isinstance(a, dict) and hasattr(a, "__dict__"))


def _make_finish(out_spec, out_leaves: list, positions: list[int], n_out: int, objects: list, index: dict):
    """The function the prologue calls on the computation's result with the caller's object arguments:
    writes the objects' new state into them, and rebuilds the output (returning the caller's own object
    where the traced code returned an argument object)."""

    def finish(values, *current_objects):
        values = tuple(values)
        user_values, extra = values[:n_out], values[n_out:]
        for obj, current in zip(objects, current_objects):
            if obj.post_spec is None:  # returned, not changed
                continue
            if type(current) is dict and list(current) != obj.keys:  # same keys (checked), another order
                pre = pytree.tree_leaves({k: current[k] for k in obj.keys})
            else:
                pre = pytree.tree_leaves(current)
            leaves = [
                pre[where] if kind == "pre" else extra[where] if kind == "out" else where for kind, where in obj.sources
            ]
            _assign_into(current, pytree.tree_unflatten(obj.post_spec, leaves))
        leaves = list(out_leaves)
        for i, v in zip(positions, user_values):
            leaves[i] = v
        for i, leaf in enumerate(out_leaves):
            k = index.get(id(leaf))
            if k is not None:
                leaves[i] = current_objects[k]
        return pytree.tree_unflatten(out_spec, leaves)

    return finish


def _collect_output(result, objects: list[_ObjectArgument]):
    """``(the trace's return value, finish, prologue expressions finish takes)``; ``finish`` is None when the
    output prints as the trace's return and no object argument changed."""
    extra: list = []
    updates = _plan_object_updates(objects, extra)
    copies = {id(o.copy) for o in objects}
    result = with_returned_closures(
        result, lambda x: isinstance(x, TracingTensor), lambda x: id(x) in copies or isinstance(x, torch.Tensor)
    )
    needed = updates + [o for o in objects if o not in updates and _contains(result, o.copy)]
    if _printable(result) and not needed:
        return unwrap(result), None, []
    index = {id(o.copy): k for k, o in enumerate(needed)}
    pytree.discover_nodes(result)
    leaves, spec = pytree.tree_flatten(result, is_leaf=lambda x: id(x) in copies)
    out_leaves = [leaf if id(leaf) in copies else _output_leaf(leaf) for leaf in leaves]
    # (a size computed from symbolic sizes is an output of the computation, like a tensor)
    positions = [
        i
        for i, leaf in enumerate(out_leaves)
        if isinstance(leaf, Proxy) or type(leaf) in (torch.SymInt, torch.SymFloat)
    ]
    proxies = [out_leaves[i] for i in positions]
    finish = _make_finish(spec, out_leaves, positions, len(proxies), needed, index)
    return tuple(proxies) + tuple(extra), finish, [o.expr for o in needed]


def _contains(tree, obj, depth: int = 0) -> bool:
    if tree is obj:
        return True
    if depth > 6:
        return False
    if isinstance(tree, (tuple, list)):
        return any(_contains(y, obj, depth + 1) for y in tree)
    if isinstance(tree, dict):
        return any(_contains(y, obj, depth + 1) for y in tree.values())
    d = getattr(tree, "__dict__", None)
    if type(d) is dict and pytree.is_registered(type(tree)):
        return any(_contains(y, obj, depth + 1) for y in d.values())
    return False


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


def trace_program(
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
    # symbolic sizes: the dimensions ``dynamic`` names, and sizes that depend on tensor values (nonzero's)
    size_env = SizeEnv(trace.make_name)
    prologue.size_env = size_env
    trace.tags["size_env"] = size_env  # (the traces transforms derive from this one keep it)
    inputs = _InputBuilder(trace, prologue, share_repeated, dynamic, size_env)
    grad_enabled = torch.is_grad_enabled()
    prologue.check_grad_and_autocast(grad_enabled)

    with tracectx(trace), size_env:
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
        target = fn
        if module is not None:
            prologue.trace.constants["_self_module"] = module
            # the module is called (on its shadow) as nn.Module.__call__ does: its forward hooks run too
            target = inputs.module_state(module, "_self_module", "t_")
        dependencies = _guard_code_dependencies(prologue, fn, inputs)
        if inputs.alias_overlapping():
            tracer.layout_read = tracer.offsets_read = True
        post_call = PostCall(inputs.tensors, inputs.state_reads)
        tracer.before_layout_change = post_call.take_layouts
        tracer.input_names = {t.proxy.name for t in inputs.tensors}

        compiling_flag = torch.compiler._is_compiling_flag if hasattr(torch.compiler, "_is_compiling_flag") else None
        _current_tracer.append(tracer)
        try:
            with _patched_replacements(executors, fn), inline_script_functions(module, fn), _TracingMode(tracer):
                if compiling_flag is not None:
                    torch.compiler._is_compiling_flag = True
                try:
                    result = target(*wrapped_args, **wrapped_kwargs)
                except Exception as e:
                    if type(e).__name__ == "GuardOnDataDependentSymNode":  # user code branched on such a size
                        raise data_dependent_size_error(e, e.__traceback__) from None
                    raise
                finally:
                    if compiling_flag is not None:
                        torch.compiler._is_compiling_flag = compiling_flag
        finally:
            _current_tracer.pop()
            reassigned = inputs.restore()
        tracer.finish()
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
        written = set()
        writes = []
        for ti in inputs.tensors:
            new = post_call.elements(ti)
            if new is not ti.proxy and ti.proxy.name not in written:
                written.add(ti.proxy.name)
                writes.append((new, ti.proxy))
        if writes:
            # (arguments sharing a storage are views of it: a write reaches them all)
            aliased = {ti.proxy.name for ti in inputs.tensors if ti.wrapper._tt_view is not None}
            unalias_outputs(result, trace, written | aliased, set(post_call.exprs))
        emit_writes(writes + tracer.constant_writes(), trace)
        if size_env.order and tracer.layout_read:
            # the layout of an input with symbolic sizes is checked as "contiguous": others are specialised
            for ti in inputs.tensors:
                if ti.example is not None and not ti.example.is_contiguous():
                    specialize(ti.proxy.shape)
        prologue.check_layout = tracer.layout_read
        prologue.check_offsets = tracer.offsets_read
        if written:  # an update reaches other arguments exactly when they share its storage
            prologue.distinct_storages = frozenset(ti.expr for ti in inputs.tensors if not ti.is_module_state)
    if written and inputs.repeated and not share_repeated:
        return trace_program(
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
        post_call.plan((ti.wrapper for ti in inputs.tensors), result)
        structure, rebuild, finish_args = post_call.wrap_output(structure, rebuild, finish_args)
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
    size_inputs = list(size_env.order)
    trace.args = [ti.proxy for ti in tensor_inputs] + size_inputs
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
        side_effects=side_effects,
        rebuild_args=finish_args,
        size_inputs=size_inputs,
    )


_IMMUTABLE_DEFAULTS = frozenset((type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device))


def _guard_code_dependencies(prologue: PrologueBuilder, fn, inputs: _InputBuilder):
    """Checks for the globals and closure variables read by ``fn``, the modules' forwards and their hooks."""
    functions = [fn]
    for m in inputs.originals:
        functions.append(type(m).forward)
        d = m.__dict__
        functions.append(d.get("forward"))
        for hooks in _HOOK_DICTS:
            functions.extend(d.get(hooks, {}).values())
    trace_only: list = []
    visited: list = []
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
