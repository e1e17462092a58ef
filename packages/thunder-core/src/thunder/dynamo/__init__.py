"""ThunderFX: Thunder as a ``torch.compile`` backend.

``torch.compile(model, backend=thunder.dynamo.ThunderCompiler(**thunder_options))`` or the
shorthand ``thunder.dynamo.thunderfx(model)``: Dynamo captures FX graphs (splitting the program at
graph breaks: ``if`` on a tensor, ``.item()``, ``print``...), Thunder compiles the regions of each
graph it supports and the fallback (eager or Inductor) runs the rest. See ``docs/dynamo.md``.

Installing thunder-core also registers ``thunder_backend`` under the name ``"thunder"`` (entry
point group ``torch_dynamo_backends``), so ``torch.compile(model, backend="thunder")`` and tools
that take a backend name (HF Trainer's ``torch_compile_backend="thunder"``) reach ThunderFX.
"""

from collections.abc import Callable

import torch

from thunder.dynamo.compiler import ThunderCompiler, ThunderFXCompiled, thunderfx
from thunder.dynamo.report import GraphBreak, RegionInfo, SplitReason, SubgraphInfo

__all__ = [
    "ThunderCompiler",
    "ThunderFXCompiled",
    "thunderfx",
    "thunder_backend",
    "GraphBreak",
    "RegionInfo",
    "SplitReason",
    "SubgraphInfo",
]


def thunder_backend(
    gm: torch.fx.GraphModule, example_inputs: list, *, options: dict | None = None, mode: str | None = None
) -> Callable:
    """The ``torch.compile`` backend named ``"thunder"``: a fresh ``ThunderCompiler`` for each graph.

    ``torch.compile(model, backend="thunder", options={...})`` passes ``options`` on as
    ``ThunderCompiler(**options)`` (``executors=``, ``fallback=``, ``cache=``...); ``mode`` has no
    meaning for Thunder and must be left unset.
    """
    if mode is not None:
        raise ValueError(
            f"torch.compile(backend='thunder', mode={mode!r}): modes are Inductor's; pass options= instead"
        )
    return ThunderCompiler(**(options or {}))(gm, example_inputs)
