"""The core's built-in plugins: ordinary plugins, listed in ``rollhub.plugins.DEFAULT_PLUGINS``."""
