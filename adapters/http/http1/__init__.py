"""Lantern's own HTTP/1.1 client for plain `http://` upstreams: keep-alive connections
(`connection`), the pool that reuses them (`pool`) and the `Upstream` over it (`upstream`). It earns its place by CPU per call
against aiohttp (bench/backend_cpu.py); TLS and everything else stay with aiohttp."""
