"""Plugins used by tests."""
