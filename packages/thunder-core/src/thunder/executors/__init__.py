"""Executors and the passes that hand a trace's operations to them."""
