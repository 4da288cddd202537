"""The GPU checks of ``bench/gpu/run.py``; every module imports with the standard library only."""
