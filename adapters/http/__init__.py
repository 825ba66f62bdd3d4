"""The HTTP clients backends post through: the `Upstream` and `UpstreamPool` protocols and httpx's
(`upstream`), aiohttp's pool (`aiohttp_pool`) and Lantern's own HTTP/1.1 client (`http1/`).

Knows no wire schema: bytes and JSON in, JSON or SSE events out, typed `adapters.errors` on failure.
"""
