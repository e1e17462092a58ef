"""Splitting a Dynamo FX graph into regions Thunder supports and regions it does not.

A node is Thunder's when its operation has a torch-language symbol (``thunder.torch``'s map from
torch callables to symbols), is a tensor metadata query the tracer answers itself, or is plain
Python on non-tensor values (``operator.add`` on ints, ``getitem`` on a tuple). Every other torch
operation goes to the fallback compiler: Thunder's tracer could run it as an opaque PyTorch call,
but then it is not fused, its output shape comes from the meta device (which fails for
data-dependent shapes) and the report could not say that Thunder did not understand it. Pass
``opaque_ops="thunder"`` to let Thunder take those operations anyway.

Grad-mode and autocast changes inside a graph (``torch.no_grad()``/``torch.autocast`` blocks in
the compiled code) are nodes too: they always get regions of their own, and ``split_module``
repeats them at the start (and, for autocast, the end) of every region inside the block; the
Thunder region strips them and applies them around its call (see ``compiler._ThunderRegion``).
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.fx.passes.split_module import split_module

from thunder.dynamo.report import SplitReason, location_from_stack_trace
from thunder.torch.registry import torch_to_thunder
from thunder.tracing.known_values import value_candidates
from thunder.tracing.tracing_tensor import _METADATA, _NONE_ATTRIBUTES  # what the tracer answers without recording

__all__ = ["GLOBAL_STATE_FUNCTIONS", "NodeSupport", "node_support", "split_graph"]

GLOBAL_STATE_FUNCTIONS = (torch._C._set_grad_enabled, torch.amp._enter_autocast, torch.amp._exit_autocast)

# operator.X on a tensor is the tensor's dunder method (and its reflection when the tensor is on the right)
_OPERATOR_DUNDERS = {
    operator.add: ("__add__", "__radd__"),
    operator.sub: ("__sub__", "__rsub__"),
    operator.mul: ("__mul__", "__rmul__"),
    operator.truediv: ("__truediv__", "__rtruediv__"),
    operator.floordiv: ("__floordiv__", "__rfloordiv__"),
    operator.mod: ("__mod__", "__rmod__"),
    operator.pow: ("__pow__", "__rpow__"),
    operator.matmul: ("__matmul__", "__rmatmul__"),
    operator.and_: ("__and__", "__rand__"),
    operator.or_: ("__or__", "__ror__"),
    operator.xor: ("__xor__", "__rxor__"),
    operator.lshift: ("__lshift__", "__rlshift__"),
    operator.rshift: ("__rshift__", "__rrshift__"),
    operator.eq: ("__eq__", "__eq__"),
    operator.ne: ("__ne__", "__ne__"),
    operator.lt: ("__lt__", "__gt__"),
    operator.le: ("__le__", "__ge__"),
    operator.gt: ("__gt__", "__lt__"),
    operator.ge: ("__ge__", "__le__"),
    operator.neg: ("__neg__", None),
    operator.pos: ("__pos__", None),
    operator.invert: ("__invert__", None),
    operator.abs: ("__abs__", None),
    operator.getitem: ("__getitem__", None),
    operator.setitem: ("__setitem__", None),
    operator.iadd: ("__iadd__", None),
    operator.isub: ("__isub__", None),
    operator.imul: ("__imul__", None),
    operator.itruediv: ("__itruediv__", None),
}


@dataclass(frozen=True)
class NodeSupport:
    supported: bool
    reason: SplitReason | None = None
    computes: bool = False  # a tensor operation (a region of only non-computing nodes is left to Python)


def _is_tensor_value(v) -> bool:
    return isinstance(v, torch.Tensor)


def _example(arg):
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else arg


def _has_tensor(args) -> bool:
    found = False

    def visit(a):
        nonlocal found
        if _is_tensor_value(_example(a)):
            found = True
        return a

    torch.fx.node.map_aggregate(args, visit)
    return found


def op_name(node: torch.fx.Node) -> str:
    """A readable name for the node's operation: ``torch.nonzero``, ``Tensor.tolist``, ``operator.add``."""
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    if node.op == "call_module":
        return f"module {t}"
    if isinstance(t, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(t)
    try:
        resolved = torch.overrides.resolve_name(t)
    except Exception:
        resolved = None
    if resolved:
        return resolved
    module = getattr(t, "__module__", None) or ""
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or repr(t)
    module = module.replace("_operator", "operator").replace("torch._C._nn", "torch.nn.functional")
    module = module.replace("torch._C._VariableFunctions", "torch").replace("torch._C._linalg", "torch.linalg")
    if module in ("", "builtins"):
        return name
    return f"{module}.{name}"


def node_support(node: torch.fx.Node, *, opaque_ops: str = "fallback") -> NodeSupport:
    """Whether Thunder takes ``node`` (a ``call_function``/``call_method``/``call_module`` node)."""

    def no(reason: str) -> NodeSupport:
        return NodeSupport(
            False,
            SplitReason(node.name, op_name(node), reason, location_from_stack_trace(node.meta.get("stack_trace"))),
            computes=True,
        )

    target = node.target
    if node.op == "call_module":
        return NodeSupport(True, computes=True)  # Thunder traces the module's forward
    if node.op == "call_function" and target in GLOBAL_STATE_FUNCTIONS:
        return no("changes grad mode or autocast inside the graph; run as is between Thunder regions")
    if node.op == "call_method":
        fn = getattr(torch.Tensor, target, None)
        if fn is None:
            return no(f"no torch.Tensor method named {target!r}")
    else:
        fn = target
    tensor_args = _has_tensor((node.args, node.kwargs))
    if node.op == "call_function" and fn in _OPERATOR_DUNDERS:
        if not tensor_args:
            return NodeSupport(True)  # Python arithmetic or indexing on non-tensor values
        names = _OPERATOR_DUNDERS[fn]
        first = _example(node.args[0]) if node.args else None
        name = names[0] if _is_tensor_value(first) or names[1] is None else names[1]
        fn = getattr(torch.Tensor, name, None)
    if fn in _METADATA or fn in _NONE_ATTRIBUTES:
        return NodeSupport(True)
    if node.op == "call_function" and (getattr(fn, "__module__", None) in ("builtins", "_operator", "math")):
        if not tensor_args:
            return NodeSupport(True)
        if fn in (builtins.getattr, builtins.len, builtins.isinstance):
            return NodeSupport(True)
    if fn in torch_to_thunder:
        return NodeSupport(True, computes=True)
    if node.op == "call_function" and not tensor_args and not _has_tensor(node.meta.get("example_value")):
        # no tensor in or out (torch._C._log_api_usage_once, torch.finfo...): Python-level, runs as is
        return NodeSupport(True)
    if isinstance(fn, torch._ops.OpOverload | torch._ops.OpOverloadPacket) and str(fn).startswith("aten.sym_"):
        return no("a symbolic-shape query (dynamic shapes); Thunder specialises on concrete shapes")
    if opaque_ops == "thunder":
        return NodeSupport(True, computes=True)
    return no("Thunder has no torch-language symbol for this operation")


_FUNCTORCH_MODULES = ("torch._functorch.predispatch", "torch._C._functorch", "torch._functorch.vmap")


def _transform_nesting(node: torch.fx.Node) -> int:
    """+1 for a node entering a functorch transform level (``_vmap_increment_nesting``), -1 for one leaving
    it, 0 for every other node."""
    if node.op != "call_function":
        return 0
    target = node.target
    if getattr(target, "__module__", None) not in _FUNCTORCH_MODULES:
        return 0
    name = getattr(target, "__name__", "")
    if name.endswith("_increment_nesting"):
        return 1
    if name.endswith("_decrement_nesting"):
        return -1
    return 0


def _is_functorch_call(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and getattr(node.target, "__module__", None) in _FUNCTORCH_MODULES


@dataclass
class _Partition:
    supported: bool
    computes: bool
    reasons: list[SplitReason]
    state: bool = False  # a grad-mode or autocast change


def _torch_callable(node: torch.fx.Node):
    """The torch callable a ``call_function``/``call_method`` node runs (``operator.add`` on a tensor is
    ``Tensor.__add__``), or None."""
    if node.op == "call_method":
        return getattr(torch.Tensor, node.target, None)
    if node.op != "call_function":
        return None
    fn = node.target
    names = _OPERATOR_DUNDERS.get(fn)
    if names is not None and node.args:
        name = names[0] if _is_tensor_value(_example(node.args[0])) or names[1] is None else names[1]
        fn = getattr(torch.Tensor, name, None)
    return fn


def _is_number_tensor(node: torch.fx.Node, number_tensors: dict) -> bool:
    """Whether ``node`` makes a 0-d CPU tensor from numbers only (``torch.div(seq_len, w)``, then ``n - 1``):
    a tensor literal, or arithmetic whose tensor arguments are such tensors themselves."""
    value = node.meta.get("example_value")
    if not isinstance(value, torch.Tensor) or value.shape != () or value.device.type != "cpu":
        return False
    if _torch_callable(node) not in value_candidates():
        return False
    tensors_ok = True

    def visit(a):
        nonlocal tensors_ok
        if isinstance(a, torch.fx.Node) and _is_tensor_value(_example(a)) and a not in number_tensors:
            tensors_ok = False
        return a

    torch.fx.node.map_aggregate((node.args, node.kwargs), visit)
    return tensors_ok


def recompute_number_tensors(gm: torch.fx.GraphModule) -> None:
    """Gives each user of a tensor computed from numbers only its own copy of that computation.

    Longformer's ``n = torch.div(seq_len, w, rounding_mode="trunc")`` is a 0-d tensor used, much later, as a
    size (``x.new_zeros((b, n + 1, w, d))``). Passed from one region to the next it would be an input, whose
    value thunder cannot know while tracing; recomputed where it is used (a few 0-d operations), thunder's
    tracer knows its value (``thunder/tracing/known_values.py``) and the region compiles.
    """
    graph = gm.graph
    number_tensors: dict[torch.fx.Node, None] = {}  # (in graph order)
    for node in graph.nodes:
        if node.op in ("call_function", "call_method") and _is_number_tensor(node, number_tensors):
            number_tensors[node] = None
    if not number_tensors:
        return
    for user in list(graph.nodes):
        if user in number_tensors or user.op == "output":
            continue
        copies: dict[torch.fx.Node, torch.fx.Node] = {}

        def copy_of(n: torch.fx.Node) -> torch.fx.Node:
            if n not in copies:
                with graph.inserting_before(user):
                    copies[n] = graph.node_copy(n, lambda a: copy_of(a) if a in number_tensors else a)
            return copies[n]

        if any(a in number_tensors for a in user.all_input_nodes):
            user.args, user.kwargs = torch.fx.node.map_arg(
                (user.args, user.kwargs), lambda a: copy_of(a) if a in number_tensors else a
            )
    for node in reversed(number_tensors):  # (users before what they use)
        if not node.users:
            graph.erase_node(node)
    gm.recompile()


def split_graph(
    gm: torch.fx.GraphModule, *, opaque_ops: str = "fallback"
) -> tuple[torch.fx.GraphModule, dict[str, _Partition]]:
    """Splits ``gm`` into consecutive runs of supported and unsupported nodes.

    Returns the split ``GraphModule`` (one ``call_module`` per region, named ``submod_<i>``)
    and, per submodule name, whether Thunder supports it, whether it computes anything and the
    reasons for unsupported nodes. Tensors computed from numbers only are first recomputed in each
    region that uses them (:func:`recompute_number_tensors`).
    """
    recompute_number_tensors(gm)
    partitions: dict[int, _Partition] = {}
    node_partition: dict[torch.fx.Node, int] = {}
    current = -1
    previous_supported = None
    previous_state = False
    transform_depth = 0  # inside torch.vmap / torch.func transforms Dynamo captured (HF 4.x masks)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr", "output"):
            continue
        nesting = _transform_nesting(node)
        if _is_functorch_call(node) or transform_depth:
            # the transform's own calls and everything under it run in the fallback, in order: Thunder's
            # programs (an autograd.Function) cannot run on functorch's batched tensors
            what = (
                "a torch.func transform's own operation"
                if _is_functorch_call(node)
                else "inside a torch.func transform"
            )
            support = NodeSupport(
                False,
                SplitReason(
                    node.name,
                    op_name(node),
                    f"{what} (functorch): runs as is in the fallback",
                    location_from_stack_trace(node.meta.get("stack_trace")),
                ),
                computes=True,
            )
            transform_depth += nesting
        else:
            support = node_support(node, opaque_ops=opaque_ops)
        is_state = node.op == "call_function" and node.target in GLOBAL_STATE_FUNCTIONS
        # Python-level nodes (metadata, arithmetic on sizes, getitem on tuples) join whatever region
        # they follow; a grad-mode or autocast change is a region of its own
        joins = support.supported and not support.computes and current >= 0
        if not joins and (support.supported != previous_supported or is_state or previous_state):
            current += 1
            partitions[current] = _Partition(support.supported, False, [], state=is_state)
        part = partitions[current]
        if not is_state:
            part.computes = part.computes or support.computes
            if support.reason is not None:
                part.reasons.append(support.reason)
        node_partition[node] = current
        if not joins:
            previous_supported, previous_state = support.supported, is_state

    split = split_module(gm, gm, lambda n: node_partition[n], keep_original_order=True, keep_original_node_name=True)
    return split, {f"submod_{i}": p for i, p in partitions.items()}


def rename_submodules(split: torch.fx.GraphModule, names: Callable[[str], str]) -> None:
    """Renames the split graph's region submodules (``submod_3`` -> ``names("submod_3")``)."""
    for node in split.graph.nodes:
        if node.op == "call_module" and node.target.startswith("submod_"):
            new = names(node.target)
            module = getattr(split, node.target)
            delattr(split, node.target)
            split.add_submodule(new, module)
            node.target = new
    split.recompile()
