"""A traced program's inputs: arguments and module state turned into proxies and stand-ins, with the prologue's reads and checks."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import torch

from thunder.core import pytree
from thunder.core.proxies import TensorProxy
from thunder.core.trace import TraceCtx
from thunder.tracing import guards
from thunder.tracing.errors import TracingError, describe_location, user_frame
from thunder.tracing.prologue import PrologueBuilder
from thunder.tracing.tracer import (
    TracingTensor,
    alias_of_storage,
    seed_storage,
    set_input_layout,
)
from thunder.tracing.version_counters import same_counter, share_argument_counters


def _reject_unusual_tensor(t: torch.Tensor, what: str) -> None:
    """A clear error for a nested or non-strided (sparse, mkldnn) tensor among the inputs (``what``: which one)."""
    if t.is_nested or t.layout is not torch.strided:
        raise TypeError(
            f"thunder.jit does not support {'nested' if t.is_nested else str(t.layout)} tensors "
            f"as inputs ({what}); pass a regular (strided) tensor"
        )


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
    captured: bool = False  # a tensor the traced code read from outside its arguments (``_InputBuilder.captured``)


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


def _emit_state_reads(prologue: PrologueBuilder, inputs: _InputBuilder, used: set[str]) -> None:
    """Module tensors the computation uses become prologue locals, checked with the arguments."""
    for name, expr, proxy, example in inputs.state_reads:
        if name in used:
            prologue.read_state(name, expr, inputs.state_sources.get(name))
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
        # local name -> (module expression, module, "_parameters" or "_buffers", key) for tensors read from those dicts
        self.state_sources: dict = {}
        self.shadows: dict = {}  # id(user's module) -> the shadow the traced code runs on
        self.guarded_modules: set[int] = set()
        self.first_read: dict[int, str] = {}  # id(tensor) -> where the prologue reads it first
        self.module_names: dict[str, str] = {}  # prologue constant -> the module's name for messages
        self.attribute_snapshots: dict[int, dict] = {}
        self.objects: list[_ObjectArgument] = []  # arguments holding tensors inside Python objects
        self.object_attributes: set[tuple[int, str]] = set()  # (id(module), attribute) held as such objects
        self.shared_storages: list[tuple[str, tuple[str, ...]]] = []  # (storage input, the inputs viewing it)
        self.captured_tensors: dict[int, TracingTensor] = {}  # id -> stand-in, see ``captured``
        # (captured input, the inputs sharing its memory, where it was read): see refuse_updates_of_shared_captured
        self.captured_sharing: list[tuple[str, list[str], str]] = []
        self.on_captured = None  # called with (stand-in, expression) of each captured tensor (PostCall.add_input)

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
            _reject_unusual_tensor(value, f"argument {expr}")
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
            if type(value) is not torch.Tensor:
                wrapper._tt_class = type(value)  # (x.__class__ in the traced code: nn.Parameter, a subclass)
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

    def captured(self, t: torch.Tensor) -> TracingTensor:
        """The stand-in of a tensor the traced code reads from outside its arguments (a global, a closure's variable,
        a module that is not the one jitted): an input of the program, made at its first read, which the prologue
        passes as it holds the tensor and checks as an argument. So the backward accumulates its gradient as eager's
        does, an update reaches it as an argument's, its views and a return of it are the tensor's own, and a change
        of its sizes traces again."""
        # (an argument or module tensor read again through a global: its own stand-in, so updates reach both)
        wrapper = self.captured_tensors.get(id(t))
        if wrapper is None:
            wrapper = self.by_id.get(id(t))
        if wrapper is not None:
            return wrapper
        # (with the tracing mode off, as inside a torch call, also where Function.apply or a return reads the tensor:
        # is_leaf and _base read through the mode answered for a stand-in, and a global that is no leaf became a
        # leaf requiring grad, whose in-place update was refused)
        with torch._C.DisableTorchFunction():
            return self._captured(t)

    def _captured(self, t: torch.Tensor) -> TracingTensor:
        _reject_unusual_tensor(t, "a tensor read from outside the arguments")
        expr = self.prologue.constant(t, "_captured")
        wrapper = self._stand_in(t, "captured")
        proxy = wrapper._thunder_proxy
        if isinstance(t, torch.nn.Parameter):
            wrapper._is_param = True
        self.captured_tensors[id(t)] = wrapper
        shares = self._sharing_storage(t)
        if shares:  # (checked once the updates are known: program.refuse_updates_of_shared_captured)
            self.captured_sharing.append((proxy.name, shares, describe_location(user_frame())))
        self.first_read.setdefault(id(t), expr)
        self.tensors.append(_TensorInput(proxy.name, proxy, wrapper, True, example=t, captured=True))
        self.state_reads.append((proxy.name, expr, proxy, t))
        if self.on_captured is not None:
            self.on_captured(wrapper, expr)
        return wrapper

    def _stand_in(self, t: torch.Tensor, name: str) -> TracingTensor:
        """A new stand-in with ``t``'s metadata and layout (module state, a captured tensor), its proxy named
        ``name``."""
        proxy = TensorProxy(
            self.trace.add_name(name), shape=t.shape, dtype=t.dtype, device=t.device, requires_grad=t.requires_grad
        )
        wrapper = TracingTensor(proxy)
        set_input_layout(wrapper, t)
        if type(t) is not torch.Tensor:
            wrapper._tt_class = type(t)  # (x.__class__ in the traced code: nn.Parameter, a subclass)
        return wrapper

    def _sharing_storage(self, t: torch.Tensor) -> list[str]:
        """The inputs whose caller's tensor shares ``t``'s memory."""
        with torch._C.DisableTorchFunction():
            if not t.untyped_storage().nbytes():
                return []
            ptr = t.untyped_storage().data_ptr()
            names = []
            for ti in self.tensors:
                real = ti.example if ti.example is not None else ti.original
                if real is not None and real is not t and real.untyped_storage().data_ptr() == ptr:
                    names.append(ti.proxy.name)
            return names

    def refuse_updates_of_shared_captured(self, written: set[str]) -> None:
        """Raises where the program updates a captured tensor (``captured``) or an input sharing its memory: the
        program holds them as two inputs, so the update would not reach the other as in eager."""
        for name, others, where in self.captured_sharing:
            updated = [n for n in (name, *others) if n in written]
            if updated:
                raise TracingError(
                    "thunder.jit: the function reads a tensor from outside its arguments (a global, a closure's) "
                    f"that shares memory with its input(s) {', '.join(others)}, and updates {', '.join(updated)} in "
                    "place; the update would not reach the other as in eager. Pass the tensor as an argument, or "
                    f"clone it before the call\n  {where}"
                )

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
            _reject_unusual_tensor(t, f"{'parameter' if kind == '_parameters' else 'buffer'} {qual}")
            wrapper = self._stand_in(t, prefix + _sanitize(qual))
            proxy = wrapper._thunder_proxy
            if kind == "_parameters":
                wrapper._is_param = True
            self.by_id[id(t)] = wrapper
            self.first_read[id(t)] = expr
            self.tensors.append(_TensorInput(proxy.name, proxy, wrapper, True, container, key, t))
            self.state_reads.append((proxy.name, expr, proxy, t))
            if kind:
                self.state_sources[proxy.name] = (expr[: -len(f".{kind}[{key!r}]")], m, kind, key)
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
        empty: dict[int, list[tuple[_TensorInput, torch.Tensor]]] = {}
        for ti in self.tensors:
            value = ti.original if ti.is_module_state else ti.example
            if value is None or value.is_meta or not value.layout == torch.strided:
                continue
            ptr = value.untyped_storage().data_ptr()
            if ptr == 0:  # (no allocation: empty tensors made on their own share no memory)
                if not ti.is_module_state:  # (but views of one base share eager's version counter)
                    base = value if value._base is None else value._base
                    members = empty.setdefault(id(base), [])
                    if all(m[1] is not value for m in members):
                        members.append((ti, value))
                continue
            members = groups.setdefault(ptr, [])
            if all(m[1] is not value for m in members):
                members.append((ti, value))
        for members in empty.values():
            if len(members) > 1:
                self._share_counters(members[0][0].wrapper, members)
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
            root._tt_whole_storage = True  # (see views.strided_on_shared_storage)
            set_input_layout(root, storage)
            self.tensors.append(_TensorInput(expr, proxy, root, False, example=storage))
            self.shared_storages.append((proxy.name, tuple(ti.proxy.name for ti, _ in members)))
            for ti, value in members:
                alias_of_storage(ti.wrapper, root, value)
            seed_storage(root, [ti.wrapper for ti, _ in members])
            self._share_counters(root, members)
        return aliased

    def _share_counters(self, root: TracingTensor, members: list) -> None:
        """The stand-ins of ``members`` (arguments sharing a storage, or empty views of one base) share one version
        count where eager's tensors share one counter; the prologue checks that sharing at each call."""
        sharing = share_argument_counters(root, [(ti.wrapper, value) for ti, value in members])
        self.prologue.trace.constants["_same_counter"] = same_counter
        for (ti, _), shares in zip(members[1:], sharing):
            self.prologue.fail_unless(
                f"_same_counter({members[0][0].expr}, {ti.expr}) is {shares}", "arguments sharing a version counter"
            )

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


def outside_tensors_returned(tracer, result):
    """``result`` with each tensor from outside the inputs that it holds as it is (``return some_global``) replaced
    by its stand-in: an input of the program (``_InputBuilder.captured``), which the call returns as the tensor
    itself, as eager does."""

    def stand_in(x):
        return x if type(x) is TracingTensor or not isinstance(x, torch.Tensor) else tracer.outside_tensor(x)

    leaves = pytree.tree_leaves(result)
    if all(type(x) is TracingTensor or not isinstance(x, torch.Tensor) for x in leaves):
        return result
    return pytree.tree_map(stand_in, result)
