"""Helpers shipped for the tutorials (``thunder.tests.litgpt_model``)."""
