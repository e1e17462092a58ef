"""The torch language (``ltorch``): one symbol per PyTorch operation, with PyTorch's semantics.

Each symbol decomposes into prims through the core language; ``torch_to_thunder`` maps torch
callables (``torch.add``, ``Tensor.add``, ``Tensor.__add__``...) to them for the tracer.
"""

from thunder.core.dtypes import to_dtype, to_torch_dtype  # noqa: F401
from thunder.torch.backward import *  # noqa: F401,F403
from thunder.torch.conversion import *  # noqa: F401,F403
from thunder.torch.elementwise import *  # noqa: F401,F403
from thunder.torch.factories import *  # noqa: F401,F403
from thunder.torch.indexing import *  # noqa: F401,F403
from thunder.torch.native_kernels import *  # noqa: F401,F403
from thunder.torch.nn import *  # noqa: F401,F403
from thunder.torch.reductions import *  # noqa: F401,F403
from thunder.torch.registry import InplaceOp, symbols_by_name, torch_to_thunder, torchsymbol  # noqa: F401
from thunder.torch.shape import *  # noqa: F401,F403
