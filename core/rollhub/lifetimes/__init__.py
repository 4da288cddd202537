"""Threads and processes with a bounded lifetime: an event loop on a private thread,
and child processes that never outlive their parent."""
