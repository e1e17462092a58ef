"""Gradient rules for torch-language operations whose backward is better than their decomposition's."""

from __future__ import annotations
