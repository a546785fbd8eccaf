"""Settings and defaults shared by every lakelog package (read from LAKELOG_* variables)."""

from conf.settings import Settings, load_settings

__all__ = ["Settings", "load_settings"]
