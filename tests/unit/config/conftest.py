"""Every config test runs in its own directory, with no environment overrides, no
entry-point plugins (unless it passes some) and the modules it wrote unloaded after."""

from config.fixtures import isolated, real_entry_points, write

__all__ = ["isolated", "real_entry_points", "write"]
