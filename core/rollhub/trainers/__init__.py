"""Trainers that ship with the core."""
