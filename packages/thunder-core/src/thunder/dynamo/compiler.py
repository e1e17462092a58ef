"""``ThunderCompiler`` (a ``torch.compile`` backend) and ``thunderfx`` (its shorthand).

Dynamo turns the user's Python into FX graphs, breaking the graph wherever Python needs a tensor's
value or does something Dynamo cannot capture, and hands each graph to the backend.
``ThunderCompiler`` splits each graph into regions Thunder supports and regions it does not
(``splitter.split_graph``), gives the first to ``thunder.jit`` and the others to the fallback
compiler (eager PyTorch, Inductor, or any ``torch.compile`` backend), and returns the split graph,
which Dynamo runs. Every step is recorded for ``ThunderFXCompiled.report()``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from thunder.compiler import _DEFAULT_RECOMPILE_LIMIT
from thunder.dynamo.op_for_op import op_for_op_reason
from thunder.dynamo.report import (
    GraphBreak,
    RegionInfo,
    SplitReason,
    SubgraphInfo,
    format_report,
    location_from_frames,
)
from thunder.dynamo.splitter import GLOBAL_STATE_FUNCTIONS, rename_submodules, split_graph

__all__ = ["ThunderCompiler", "ThunderFXCompiled", "thunderfx"]

_FALLBACKS = ("eager", "inductor")
_OPAQUE_OPS = ("fallback", "thunder")
_OP_FOR_OP = ("graph", "thunder")


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        shape = "x".join(str(s) for s in x.shape) or "scalar"
        grad = ", requires_grad" if x.requires_grad else ""
        kind = "parameter" if isinstance(x, torch.nn.Parameter) else "tensor"
        return f"{kind} {str(x.dtype).replace('torch.', '')}[{shape}]{grad}"
    return type(x).__name__


def _input_key(args) -> tuple:
    key = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), a.stride(), a.dtype, a.device, a.requires_grad))
        else:
            key.append((type(a), a if isinstance(a, int | float | bool | str | None) else id(a)))
    return tuple(key)


class _LazyCompiled(torch.nn.Module):
    """A fallback region compiled on its first call with the real inputs, again for new input metadata.

    ``compile_fn(graph_module, example_inputs)`` is a ``torch.compile``-style backend; the region's
    compiled code specialises on the inputs' shapes, strides, dtypes and devices, so each new
    combination is compiled once.
    """

    def __init__(self, graph_module: torch.fx.GraphModule, compile_fn: Callable, name: str):
        super().__init__()
        self.graph_module = graph_module
        self._compile_fn = compile_fn
        self._name = name
        self._compiled: dict[tuple, Callable] = {}

    def forward(self, *args):
        key = _input_key(args)
        fn = self._compiled.get(key)
        if fn is None:
            fn = self._compile_fn(self.graph_module, list(args))
            self._compiled[key] = fn
        out = fn(*args)
        return tuple(out) if isinstance(out, list) else out


def _inductor(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    if not any(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes):
        return gm
    return torch._inductor.compile(gm, example_inputs)


def _make_fallback(gm: torch.fx.GraphModule, fallback, name: str) -> torch.nn.Module:
    if fallback == "eager":
        return gm
    if fallback == "inductor":
        return _LazyCompiled(gm, _inductor, name)
    return _LazyCompiled(gm, fallback, name)


class _ThunderRegion(torch.nn.Module):
    """A region compiled by ``thunder.jit``.

    ``split_module`` repeats grad-mode and autocast changes at the start of each region inside the
    ``torch.no_grad()``/``torch.autocast`` block (and autocast exits at its end); they are taken out
    of the graph Thunder traces and applied around the call, so Thunder traces under, and its cache
    checks, the same grad mode and autocast state as eager. If Thunder cannot compile the region
    (an error while tracing or compiling, before anything ran), it goes to the fallback compiler and
    the reason is recorded.

    A region whose inputs change on every call in a way Thunder specialises on (a size Dynamo
    passes as a symbolic integer, such as the number of tokens routed to one expert of a
    mixture-of-experts layer) would compile a new program for each new value, taking far longer
    than it runs. Once it has compiled ``recompile_limit`` programs (``thunder.jit``'s option, 8 by
    default) it goes to the fallback too, with the reason recorded; the programs compiled so far
    are dropped.

    With ``op_for_op="graph"`` (``ThunderCompiler``'s default), a region whose first compiled program
    has nothing to gain over the region's own FX graph (``op_for_op.op_for_op_reason``: it calls
    PyTorch's kernels one operation at a time) runs that graph from its second call on; the reason
    is recorded in ``info.runs_graph``.
    """

    def __init__(self, info: RegionInfo, jit_options: dict, fallback, thunder_jit: Callable, op_for_op: str = "graph"):
        super().__init__()
        gm = info.graph_module
        self._prelude, self._epilogue = _strip_global_state(gm)
        self._same_global_state = not (self._prelude or self._epilogue)
        self.info = info
        self.thunder_module = thunder_jit(gm, **jit_options)
        info.compiled = self.thunder_module
        self._jit_options = jit_options
        self._fallback_spec = fallback
        self._fallback = None
        self._graph = None  # the region's graph code, once it runs instead of Thunder's program (op_for_op)
        self._op_for_op = op_for_op
        self._stats = None
        self._recompile_limit = jit_options.get("recompile_limit", _DEFAULT_RECOMPILE_LIMIT)

    @property
    def runs(self) -> str | None:
        """What runs the region now: ``"thunder"``, ``"graph"`` (Dynamo's graph, see ``op_for_op``),
        ``"fallback"``, or None before Thunder has compiled it."""
        if self._graph is not None:
            return "graph"
        if self._fallback is not None:
            return "fallback"
        return "thunder" if self._stats is not None and self._stats.cache_misses else None

    def forward(self, *args):
        if self._graph is not None and self._same_global_state:
            return self._graph(*args)
        env: dict[str, Any] = {}
        for name, target, fargs in self._prelude:
            env[name] = target(*(env[a] if isinstance(a, _Ref) else a for a in fargs))
        try:
            return self._call(args)
        finally:
            for _, target, fargs in self._epilogue:
                target(*(env[a] if isinstance(a, _Ref) else a for a in fargs))

    def _call(self, args):
        if self._graph is not None:
            return self._graph(*args)
        if self._fallback is not None:
            return self._fallback(*args)
        stats = self._stats
        if stats is None:
            import thunder

            stats = self._stats = thunder.compile_stats(self.thunder_module)
        misses, last = stats.cache_misses, stats.last_traces
        try:
            out = self.thunder_module(*args)
        except Exception as e:
            if not (stats.cache_misses > misses and stats.last_traces is last):
                raise  # it failed while running: the program may have had effects, so don't retry it
            first_line = (str(e).strip().splitlines() or [""])[0]
            self._give_to_fallback(
                f"Thunder could not compile this region ({type(e).__name__}: {first_line}); it runs in the fallback"
            )
            return self._fallback(*args)
        if stats.cache_misses == misses:
            return out
        if self._op_for_op == "graph" and misses == 0:
            why = op_for_op_reason(self.thunder_module, self._jit_options)
            if why is not None:
                self.info.runs_graph = why
                self._graph = self.info.graph_module.forward
                return out
        limit = self._recompile_limit
        if limit is not None and stats.cache_misses >= limit:
            self._give_to_fallback(
                f"Thunder compiled {stats.cache_misses} programs for this region (recompile_limit={limit}): "
                "an input it specialises on changes from call to call (a size Dynamo passes as a symbolic "
                f"integer, such as the number of tokens routed to one expert); it runs in the fallback"
            )
        return out

    def _give_to_fallback(self, why: str) -> None:
        reason = SplitReason("(region)", "thunder.jit", why)
        warnings.warn(f"ThunderFX: {reason.reason}", stacklevel=3)
        self.info.kind = "fallback"
        self.info.reasons.append(reason)
        self._fallback = _make_fallback(self.info.graph_module, self._fallback_spec, self.info.name)
        self.info.compiled = self._fallback
        self.thunder_module = None  # its compiled programs are no longer used


class _SplitGraphRunner:
    """What Dynamo calls for one of its graphs: the split graph, until no region of it runs a Thunder program.

    Once every Thunder region runs its own FX graph (``op_for_op``) or the eager fallback, the split
    graph computes what Dynamo's graph computes, region by region, with one more call per region:
    from then on Dynamo's graph runs as captured (``backend="eager"`` does the same).
    """

    def __init__(
        self,
        split: torch.fx.GraphModule,
        original: torch.fx.GraphModule,
        thunder_regions: list[_ThunderRegion],
        eager_fallback: bool,
        regions: list[RegionInfo],
    ):
        self._run = split
        self._original = original
        self._thunder_regions = thunder_regions
        self._eager_fallback = eager_fallback
        # a fallback region other than eager's keeps the split graph for good
        self._settled = not eager_fallback and any(r.kind == "fallback" for r in regions)
        if not self._settled:
            self._settle()

    def __call__(self, *args):
        out = self._run(*args)
        if not self._settled:
            self._settle()
        return out

    def _settle(self) -> None:
        runs = [r.runs for r in self._thunder_regions]
        if "thunder" in runs or ("fallback" in runs and not self._eager_fallback):
            self._settled = True  # a region runs something other than the region's graph
        elif all(r in ("graph", "fallback") for r in runs):
            self._run = self._original.forward
            self._settled = True


class _Ref(str):
    """A reference to the result of an earlier prelude node (by name)."""


def _strip_global_state(gm: torch.fx.GraphModule) -> tuple[list, list]:
    """Removes grad-mode/autocast nodes from the start and end of ``gm``; returns them as calls to replay."""
    nodes = [n for n in gm.graph.nodes if n.op not in ("placeholder", "output", "get_attr")]
    is_state = [n.op == "call_function" and n.target in GLOBAL_STATE_FUNCTIONS for n in nodes]
    if not any(is_state):
        return [], []
    first_compute = next((i for i, s in enumerate(is_state) if not s), len(nodes))
    last_compute = max((i for i, s in enumerate(is_state) if not s), default=-1)
    if any(is_state[first_compute : last_compute + 1]):
        raise AssertionError("internal error: a grad-mode or autocast change in the middle of a Thunder region")

    def record(n):
        args = tuple(_Ref(a.name) if isinstance(a, torch.fx.Node) else a for a in n.args)
        return (n.name, n.target, args)

    prelude = [record(n) for n in nodes[:first_compute]]
    epilogue = [record(n) for n in nodes[last_compute + 1 :]] if last_compute >= 0 else []
    for n in reversed(nodes):
        if n.op == "call_function" and n.target in GLOBAL_STATE_FUNCTIONS:
            gm.graph.erase_node(n)
    gm.recompile()
    return prelude, epilogue


class ThunderCompiler:
    """A ``torch.compile`` backend that compiles what it can with Thunder.

    ``torch.compile(model, backend=ThunderCompiler(executors=[...], cache=...))``: each FX graph
    Dynamo captures is split into regions Thunder supports, compiled with
    ``thunder.jit(region, **thunder_options)``, and regions it does not, given to ``fallback``.

    Args:
        fallback: what runs the unsupported regions: ``"eager"`` (PyTorch, the default),
            ``"inductor"`` (``torch._inductor``), or a ``torch.compile`` backend
            ``fn(graph_module, example_inputs) -> callable``, called on the region's first run with
            its real inputs (and again for new input shapes, strides, dtypes or devices).
        opaque_ops: ``"fallback"`` (the default) sends operations without a torch-language symbol
            to the fallback; ``"thunder"`` lets Thunder run them as opaque PyTorch calls.
        op_for_op: what runs a Thunder region after its first call when Thunder's program for it calls
            PyTorch's own kernels one operation at a time (executors ``torch``, ``sdpa``, ``python``;
            no fusion executor, no transform): ``"graph"`` (the default) runs the region's FX graph,
            the same kernels without Thunder's per-call cost; ``"thunder"`` keeps running Thunder's
            program. A Dynamo graph none of whose regions runs a Thunder program then runs as Dynamo
            captured it.
        **thunder_options: passed unchanged to ``thunder.jit`` for every region (``executors``,
            ``cache``, ``transforms``, compile options).

    Attributes:
        subgraph_infos: one ``SubgraphInfo`` per graph Dynamo handed over, in order.
    """

    def __init__(
        self,
        *,
        fallback: str | Callable = "eager",
        opaque_ops: str = "fallback",
        op_for_op: str = "graph",
        **thunder_options,
    ):
        if not (fallback in _FALLBACKS or callable(fallback)):
            raise ValueError(
                f"ThunderCompiler(fallback={fallback!r}): use 'eager', 'inductor' or a torch.compile backend callable"
            )
        if opaque_ops not in _OPAQUE_OPS:
            raise ValueError(f"ThunderCompiler(opaque_ops={opaque_ops!r}): use 'fallback' or 'thunder'")
        if op_for_op not in _OP_FOR_OP:
            raise ValueError(f"ThunderCompiler(op_for_op={op_for_op!r}): use 'graph' or 'thunder'")
        self.fallback = fallback
        self.opaque_ops = opaque_ops
        self.op_for_op = op_for_op
        self.thunder_options = thunder_options
        self.subgraph_infos: list[SubgraphInfo] = []
        import thunder
        from thunder.tracing.guards import install_structure_hooks

        # before Dynamo traces: it guards on the number of global module hooks
        install_structure_hooks()

        # fail now, not on the first call, for bad executors= or cache= values
        thunder.compiler.build_compile_data(
            torch.nn.Identity(),
            executors=thunder_options.get("executors"),
            cache=thunder_options.get("cache", "constant values"),
            transforms=thunder_options.get("transforms"),
            disable_torch_autograd=False,
            compile_options={},
        )

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        import thunder

        split, partitions = split_graph(gm, opaque_ops=self.opaque_ops)
        kinds = {}
        for name, part in partitions.items():
            if part.state or not part.computes:
                kinds[name] = "python"
            else:
                kinds[name] = "thunder" if part.supported else "fallback"
        new_names = {old: f"{kinds[old]}_{old.removeprefix('submod_')}" for old in partitions}
        rename_submodules(split, new_names.__getitem__)

        regions = []
        thunder_regions = []
        for node in split.graph.nodes:
            if node.op != "call_module":
                continue
            old = next(o for o, n in new_names.items() if n == node.target)
            module = getattr(split, node.target)
            info = RegionInfo(node.target, kinds[old], module, reasons=list(partitions[old].reasons))
            if info.kind == "thunder":
                region = _ThunderRegion(info, self.thunder_options, self.fallback, thunder.jit, self.op_for_op)
                setattr(split, node.target, region)
                thunder_regions.append(region)
            elif info.kind == "fallback":
                info.compiled = _make_fallback(module, self.fallback, node.target)
                setattr(split, node.target, info.compiled)
            else:
                info.compiled = module
            regions.append(info)

        reason = getattr(gm, "compile_subgraph_reason", None)
        graph_break = None
        if reason is not None and getattr(reason, "graph_break", False):
            graph_break = GraphBreak(reason.reason, location_from_frames(reason.user_stack))
        self.subgraph_infos.append(
            SubgraphInfo(gm, split, regions, graph_break, [_describe(x) for x in example_inputs])
        )
        return _SplitGraphRunner(split, gm, thunder_regions, self.fallback == "eager", regions)

    @property
    def graph_breaks(self) -> list[GraphBreak]:
        """The graph breaks that ended one of the graphs this backend compiled (see ``ThunderFXCompiled`` for all)."""
        return [i.graph_break for i in self.subgraph_infos if i.graph_break is not None]

    def thunder_modules(self) -> list:
        """The ``ThunderModule`` of every region Thunder compiled (and has not given to the fallback), in compile
        order; a region whose ``runs_graph`` is set runs its FX graph since its second call."""
        return [r.compiled for i in self.subgraph_infos for r in i.regions if r.kind == "thunder"]

    def report(self) -> str:
        """What happened to each graph: its regions, which Thunder compiled and why the others did not."""
        return format_report(self.subgraph_infos, self.graph_breaks)


class ThunderFXCompiled:
    """What ``thunderfx`` returns: calls like the original, and reports what happened.

    Attributes:
        backend: the ``ThunderCompiler`` Dynamo uses.
        compiled: the ``torch.compile`` result it calls.
    """

    def __init__(self, fn: Callable, backend: ThunderCompiler, torch_compile_options: dict):
        self._fn = fn
        self.backend = backend
        self.compiled = torch.compile(fn, backend=backend, **torch_compile_options)
        self._graph_breaks: list[GraphBreak] = []

    def __call__(self, *args, **kwargs):
        from torch._dynamo.utils import graph_break_reasons

        start = len(graph_break_reasons)
        try:
            return self.compiled(*args, **kwargs)
        finally:
            new = graph_break_reasons[start:] if len(graph_break_reasons) >= start else list(graph_break_reasons)
            for r in new:
                gb = GraphBreak(r.reason, location_from_frames(r.user_stack))
                if all((gb.summary, gb.location) != (o.summary, o.location) for o in self._graph_breaks):
                    self._graph_breaks.append(gb)

    def __getattr__(self, name: str):
        # attributes of the original (parameters(), train(), ...) for a module
        fn = self.__dict__.get("_fn")
        if fn is None:
            raise AttributeError(name)
        return getattr(fn, name)

    @property
    def subgraph_infos(self) -> list[SubgraphInfo]:
        """One ``SubgraphInfo`` per graph Dynamo captured, in order."""
        return self.backend.subgraph_infos

    @property
    def graph_breaks(self) -> list[GraphBreak]:
        """Every graph break Dynamo met while compiling (also those before which no graph was captured)."""
        return list(self._graph_breaks)

    @property
    def split_reasons(self) -> list[SplitReason]:
        """Why operations went to the fallback compiler, over all graphs."""
        return [r for i in self.subgraph_infos for r in i.split_reasons]

    def thunder_modules(self) -> list:
        """The ``ThunderModule`` of every region Thunder compiled (and has not given to the fallback)."""
        return self.backend.thunder_modules()

    def last_traces(self) -> list[list]:
        """``thunder.last_traces`` of every Thunder region that has run, in compile order."""
        import thunder

        out = []
        for tm in self.thunder_modules():
            if thunder.compile_stats(tm).last_traces is not None:
                out.append(thunder.last_traces(tm))
        return out

    def report(self) -> str:
        """A readable account: graph breaks, each graph's regions, what Thunder compiled and why not."""
        return format_report(self.subgraph_infos, self.graph_breaks)


def thunderfx(fn: Callable, /, *, torch_compile_options: dict | None = None, **options) -> ThunderFXCompiled:
    """Compiles ``fn`` (a function or ``nn.Module``) with ``torch.compile`` and Thunder as its backend.

    Dynamo splits the program at graph breaks; Thunder compiles what it supports of each graph and
    the rest goes to the fallback. The result calls like ``fn`` and reports what happened
    (``report()``, ``subgraph_infos``, ``graph_breaks``, ``split_reasons``, ``last_traces()``).

    Args:
        fn: the function or module to compile.
        torch_compile_options: passed to ``torch.compile`` (for example ``{"dynamic": False}``).
        **options: ``ThunderCompiler``'s: ``fallback``, ``opaque_ops`` and the ``thunder.jit`` options.
    """
    if not callable(fn):
        raise TypeError(f"thunderfx expects a function or an nn.Module, got {type(fn).__name__}")
    backend = ThunderCompiler(**options)
    return ThunderFXCompiled(fn, backend, dict(torch_compile_options or {}))
