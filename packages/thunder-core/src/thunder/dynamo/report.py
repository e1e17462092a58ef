"""What ThunderFX did with a program: Dynamo's graphs and graph breaks, the regions each graph was
split into, which of them Thunder compiled and why the others went to the fallback compiler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["GraphBreak", "SplitReason", "RegionInfo", "SubgraphInfo", "location_from_stack_trace"]


@dataclass(frozen=True)
class GraphBreak:
    """Where and why Dynamo ended a graph before the end of the user's function.

    Attributes:
        reason: Dynamo's explanation (its first line is the gist, e.g. ``generic_jump TensorVariable()``
            for an ``if`` on a tensor).
        location: the user's line, ``File "...", line N, in fn`` followed by the source text.
    """

    reason: str
    location: str

    @property
    def summary(self) -> str:
        """The first line of ``reason``."""
        return self.reason.strip().splitlines()[0] if self.reason.strip() else "(no reason given)"

    def __str__(self) -> str:
        return f"{self.summary}\n    {self.location}".rstrip()


@dataclass(frozen=True)
class SplitReason:
    """Why a node of a Dynamo graph did not go to Thunder.

    Attributes:
        node: the FX node's name.
        operation: the operation it calls (``torch.nonzero``, ``Tensor.tolist``...).
        reason: why it went to the fallback compiler.
        location: the user's line the node came from (from the node's ``stack_trace``), if known.
    """

    node: str
    operation: str
    reason: str
    location: str | None = None

    def __str__(self) -> str:
        where = f"\n    {self.location}" if self.location else ""
        return f"{self.operation} ({self.node}): {self.reason}{where}"


@dataclass
class RegionInfo:
    """One region of a split Dynamo graph.

    Attributes:
        name: the submodule's name in the split graph (``thunder_0``, ``fallback_1``...).
        kind: ``"thunder"`` (compiled by ``thunder.jit``), ``"fallback"`` (given to the fallback
            compiler) or ``"python"`` (no tensor computation: run as is).
        graph_module: the region as an FX ``GraphModule`` (what Thunder or the fallback was given).
        compiled: what runs it: for ``"thunder"`` the ``ThunderModule`` from ``thunder.jit``.
        reasons: for ``"fallback"`` regions, why each of its operations is not Thunder's.
        runs_graph: for a ``"thunder"`` region that runs its FX graph instead of Thunder's program
            since its second call (``ThunderCompiler(op_for_op="graph")``), why; else None.
    """

    name: str
    kind: str
    graph_module: torch.fx.GraphModule
    compiled: Any = None
    reasons: list[SplitReason] = field(default_factory=list)
    runs_graph: str | None = None

    @property
    def num_ops(self) -> int:
        return sum(1 for n in self.graph_module.graph.nodes if n.op in ("call_function", "call_method", "call_module"))


@dataclass
class SubgraphInfo:
    """One FX graph Dynamo handed to the backend, and what became of it.

    Attributes:
        original_graph_module: the graph as Dynamo produced it.
        split_graph_module: the graph Dynamo runs: one submodule call per region.
        regions: the regions in execution order.
        graph_break: why Dynamo ended this graph, when it ended at a graph break.
        example_inputs: a description of the inputs Dynamo compiled the graph for.
    """

    original_graph_module: torch.fx.GraphModule
    split_graph_module: torch.fx.GraphModule
    regions: list[RegionInfo]
    graph_break: GraphBreak | None = None
    example_inputs: list[str] = field(default_factory=list)

    @property
    def thunder_regions(self) -> list[RegionInfo]:
        """The regions Thunder compiled (including any that later failed and fell back; see ``kind``)."""
        return [r for r in self.regions if r.kind == "thunder"]

    @property
    def fallback_regions(self) -> list[RegionInfo]:
        return [r for r in self.regions if r.kind == "fallback"]

    @property
    def split_reasons(self) -> list[SplitReason]:
        """Why operations of this graph were not compiled by Thunder."""
        return [reason for r in self.regions for reason in r.reasons]


def location_from_stack_trace(stack_trace: str | None) -> str | None:
    """The innermost ``File ..., line N, in fn`` of an FX node's ``stack_trace`` and its source line."""
    if not stack_trace:
        return None
    lines = stack_trace.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lstrip().startswith("File "):
            where = lines[i].strip()
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            if code and not code.lstrip("~^ "):
                code = ""  # a line of carets
            return f"{where}\n    {code}" if code else where
    return None


def location_from_frames(frames) -> str:
    """The innermost frame of Dynamo's ``user_stack`` (``traceback.FrameSummary`` objects), formatted."""
    if not frames:
        return "(location unknown)"
    f = frames[-1]
    where = f'File "{f.filename}", line {f.lineno}, in {f.name}'
    return f"{where}\n    {f.line.strip()}" if f.line else where


def format_report(infos: list[SubgraphInfo], graph_breaks: list[GraphBreak]) -> str:
    """A human-readable account of what happened (what ``ThunderFXCompiled.report()`` returns)."""
    n_thunder = sum(len(i.thunder_regions) for i in infos)
    n_fallback = sum(len(i.fallback_regions) for i in infos)
    out = [
        f"ThunderFX: {len(infos)} Dynamo graph(s), {len(graph_breaks)} graph break(s), "
        f"{n_thunder} region(s) compiled by Thunder, {n_fallback} region(s) given to the fallback"
    ]
    if graph_breaks:
        out.append("Graph breaks:")
        for i, gb in enumerate(graph_breaks):
            out.append(f"  {i + 1}. {gb.summary}")
            out.append(_indent(gb.location, 5))
    for gi, info in enumerate(infos):
        inputs = ", ".join(info.example_inputs[:3])
        if len(info.example_inputs) > 3:
            inputs += f", ... ({len(info.example_inputs)} inputs)"
        out.append(f"Graph {gi} ({inputs}):")
        if info.graph_break is not None:
            out.append(f"  ends at a graph break: {info.graph_break.summary}")
        for r in info.regions:
            line = f"  {r.name}: {_KIND_TEXT[r.kind]}, {r.num_ops} op(s)"
            if r.kind == "python":
                line += ": " + ", ".join(_op_names(r.graph_module))
            out.append(line)
            if r.kind == "thunder" and r.runs_graph:
                out.append(f"    runs its graph: {r.runs_graph}")
            for reason in r.reasons:
                out.append(f"    - {reason.operation} ({reason.node}): {reason.reason}")
                if reason.location:
                    out.append(_indent(reason.location, 6))
    return "\n".join(out)


_KIND_TEXT = {"thunder": "Thunder", "fallback": "fallback", "python": "run as is"}


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line.strip() for line in text.splitlines())


def _op_names(gm: torch.fx.GraphModule) -> list[str]:
    from thunder.dynamo.splitter import op_name

    return [op_name(n) for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
