"""Where the kernels run: Triton's CPU interpreter by default, the GPU with THUNDER_TRITON_TEST_DEVICE=cuda.

By default the tests run the kernels in Triton's interpreter on CPU tensors: TRITON_INTERPRET=1
must be set before Triton is imported. With ``THUNDER_TRITON_TEST_DEVICE=cuda`` the interpreter
stays off (unless already set) and tensors the tests create without a device are CUDA tensors
(``torch.set_default_device``), so the compiled kernels run on the GPU.
"""

from __future__ import annotations

import os

import torch

ON_CUDA = os.environ.get("THUNDER_TRITON_TEST_DEVICE", "").strip().lower() == "cuda"

if ON_CUDA:
    torch.set_default_device("cuda")
else:
    os.environ["TRITON_INTERPRET"] = "1"
