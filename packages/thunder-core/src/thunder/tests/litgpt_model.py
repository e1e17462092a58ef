"""LitGPT's ``GPT`` and ``Config`` for the tutorials, plus small named configs for tests and demos.

Models are built from configs with random weights; nothing is downloaded.
"""

from __future__ import annotations

try:
    from litgpt import GPT as GPT
    from litgpt import Config as _LitConfig
    from litgpt.config import name_to_config as _name_to_config
except ImportError as e:  # pragma: no cover - litgpt is an optional dependency
    raise ImportError("thunder.tests.litgpt_model needs the litgpt package: pip install litgpt") from e

__all__ = ["GPT", "Config", "configs"]

configs = [
    # a small Llama-2-like model: what the tutorials call "llama2-like"
    dict(
        name="llama2-like",
        block_size=4096,
        vocab_size=32000,
        padded_vocab_size=32000,
        n_layer=2,
        n_head=32,
        n_embd=4096,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=11008,
    ),
    dict(
        name="llama-tiny",
        block_size=256,
        vocab_size=1024,
        padded_vocab_size=1024,
        n_layer=2,
        n_head=4,
        n_query_groups=2,
        n_embd=256,
        rotary_percentage=1.0,
        parallel_residual=False,
        bias=False,
        norm_class_name="RMSNorm",
        mlp_class_name="LLaMAMLP",
        intermediate_size=688,
    ),
]

for _c in configs:
    _name_to_config.setdefault(_c["name"], _c)


class Config(_LitConfig):
    """LitGPT's ``Config``; ``Config.from_name`` also knows this module's small configs."""
