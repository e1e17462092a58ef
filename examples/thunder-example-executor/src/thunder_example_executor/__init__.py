"""An example third-party Thunder executor plugin (see ``plugin.py`` for the hooks)."""

__version__ = "0.1.0"
