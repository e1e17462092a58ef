"""Trace transforms: autodiff (grad rules, forward/backward split) and the user-facing functional transforms."""
