"""ThunderFX: Thunder as a ``torch.compile`` backend.

``torch.compile(model, backend=thunder.dynamo.ThunderCompiler(**thunder_options))`` or the
shorthand ``thunder.dynamo.thunderfx(model)``: Dynamo captures FX graphs (splitting the program at
graph breaks: ``if`` on a tensor, ``.item()``, ``print``...), Thunder compiles the regions of each
graph it supports and the fallback (eager or Inductor) runs the rest. See ``docs/dynamo.md``.
"""

from thunder.dynamo.compiler import ThunderCompiler, ThunderFXCompiled, thunderfx
from thunder.dynamo.report import GraphBreak, RegionInfo, SplitReason, SubgraphInfo

__all__ = [
    "ThunderCompiler",
    "ThunderFXCompiled",
    "thunderfx",
    "GraphBreak",
    "RegionInfo",
    "SplitReason",
    "SubgraphInfo",
]
