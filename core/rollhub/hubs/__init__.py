"""The hub family: the async episode pipeline, its synchronous twin, what hooks see of
it, hosting one in a foreign process, and what a hub tracks per episode."""
