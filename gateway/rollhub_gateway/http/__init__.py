"""Serving the gateway over HTTP: the aiohttp application server with its fast path in
front (:mod:`.app_server`, :mod:`.fast_path`, :mod:`.request_head`), and the ways to run a
gateway (on a running loop, in a background thread, standalone: :mod:`.serving`)."""
