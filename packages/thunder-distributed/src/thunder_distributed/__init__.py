"""thunder-distributed: data-parallel and tensor-parallel training for Thunder as trace transforms over ``torch.distributed``.

Installed, it is what ``thunder.distributed`` re-exports::

    import thunder, thunder.distributed

    torch.distributed.init_process_group(backend="nccl")  # or "gloo" on CPUs
    model = thunder.jit(thunder.distributed.fsdp(model))  # or thunder.distributed.ddp(model)

Tensor parallelism: ``thunder.jit(thunder.distributed.tensor_parallel(model, thunder.distributed.litgpt_plan(model)))``.
The communication (``all_reduce``, ``all_gather``, ``reduce_scatter``, ``wait``, ``tensor_parallel_copy``,
``tensor_parallel_reduce``) appears in the forward and backward traces (``thunder.last_traces``, ``thunder.last_backward_traces``).
"""

from __future__ import annotations

from thunder_distributed.checkpoint import get_model_state_dict, load_model_state_dict
from thunder_distributed.ddp import ddp
from thunder_distributed.fsdp import FSDPBucketingStrategy, FSDPType, fsdp
from thunder_distributed.ops import all_gather, all_reduce, dist_ex, reduce_scatter, synchronize, wait
from thunder_distributed.tensor_parallel import litgpt_plan, tensor_parallel

__version__ = "0.1.0"

__all__ = [
    "ddp",
    "fsdp",
    "tensor_parallel",
    "litgpt_plan",
    "FSDPType",
    "FSDPBucketingStrategy",
    "get_model_state_dict",
    "load_model_state_dict",
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "wait",
    "synchronize",
    "dist_ex",
]
