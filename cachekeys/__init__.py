"""Prefix-stable prompts: pure functions, no I/O; imports only adapters.types.

canonical (order, canonical JSON) · volatile (relocation) · normalise / raw (the switches over
canonical requests and raw wire dicts) · layout (blocks in cache order) · markers (provider
breakpoints) · blockhash / keys (tenant-scoped keys and hashes) · diagnosis (cache-break reasons).
"""
