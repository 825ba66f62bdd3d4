"""Prefix-stable prompts: pure functions, no I/O; imports only adapters.types.

canonical (order, canonical JSON) · volatile (relocation) · normalise (the switches, over the
client's wire JSON) · isolation (the cache-scope line) · layout (blocks in cache order) ·
markers (provider breakpoints) · blockhash / keys (tenant-scoped keys and hashes) · diagnosis
(cache-break reasons) · conversation_memo (what a conversation's next call reuses) ·
tenant_table (in-process tables no tenant can push another's entries out of).
"""
