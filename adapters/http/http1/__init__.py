"""Lantern's own HTTP/1.1 client for plain `http://` upstreams: a keep-alive connection pool
(`connection`) and the `Upstream` over it (`upstream`). It earns its place by CPU per call
against aiohttp (bench/backend_cpu.py); TLS and everything else stay with aiohttp."""
