"""The module the ``thunder`` entry point names: provides ``thunder.distributed``; nothing heavy at import."""

from __future__ import annotations

from thunder.plugins import hookimpl


def _unavailable() -> str | None:
    import torch.distributed as dist

    if not dist.is_available():
        return "this PyTorch build has no torch.distributed"
    return None


@hookimpl
def thunder_unavailable_reason() -> str | None:
    return _unavailable()


@hookimpl
def thunder_distributed():
    if _unavailable() is not None:
        return None
    import thunder_distributed

    return thunder_distributed
