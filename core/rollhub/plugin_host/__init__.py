"""Hosting plugins: building components from config, calling hooks, checking each
plugin's settings, and telling a user which plugin a name is missing from."""
