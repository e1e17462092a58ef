"""Thunder's nvFuser executor plugin: regions of prims on CUDA tensors compiled by nvFuser.

Importing this package imports neither nvFuser nor the executor; ``thunder.discover()`` loads
:mod:`thunder_nvfuser.plugin`, which provides the ``nvfuser`` executor
(:data:`thunder_nvfuser.executor.nvfuser_ex`) only when nvFuser imports and a CUDA device is
present, and otherwise says which of the two is missing.
"""

__version__ = "0.1.0"
