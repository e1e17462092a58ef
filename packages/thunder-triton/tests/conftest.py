"""Runs Triton kernels in Triton's CPU interpreter: must be set before Triton is imported."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"
