"""Differential fuzzing of ``thunder.jit`` against eager PyTorch.

``programs`` draws random straight-line Python functions over torch ops (each vocabulary feature a
switch), ``check`` runs one eagerly and through ``thunder.jit`` on cloned inputs and compares
values, dtypes, ``requires_grad``, inputs updated in place and gradients. ``test_differential.py``
is the CI entry point; ``fuzz_campaign.py`` runs long local campaigns and tallies mismatch classes.
"""
