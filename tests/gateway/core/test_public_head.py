"""The backend call carries the tenant's declared-public head (what the bundled engine may share
across tenants), computed from the tenant's `cache.public_prefixes`, next to its salt."""

from __future__ import annotations

import asyncio

from adapters.types import ChatRequest, Message, PublicHead, TextPart
from cachekeys.layout import system_digest_hex
from gateway.core.pipeline import IncomingCall
from policies.cache import CachePolicy, PublicPrefix
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from quotas.memory import MemoryQuotaStore
from tests.gateway.core.pipeline_harness import build

RULES = "Shared help-desk rules."


def _call(tenant: TenantPolicy) -> IncomingCall:
    system = [{"role": "system", "content": RULES}, {"role": "system", "content": "Acme only."}]
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [*system, {"role": "user", "content": "hi"}],
    }
    request = ChatRequest(
        model="m",
        messages=(Message("user", (TextPart("hi"),)),),
        system=(TextPart(RULES), TextPart("Acme only.")),
        max_tokens=10,
    )
    return IncomingCall("openai", tenant, "k1", request, body)


def _sent(tenant: TenantPolicy) -> ChatRequest:
    h = build(MemoryQuotaStore())

    async def main() -> None:
        await h.pipeline.complete(await h.pipeline.admit(_call(tenant)))

    asyncio.run(main())
    (request,) = h.backend.requests
    return request


def test_the_public_system_block_is_the_head_and_the_salt_travels_with_it() -> None:
    public = CachePolicy(public_prefixes=(PublicPrefix(system_sha256=system_digest_hex(RULES)),))
    limits = LimitsPolicy(max_output_tokens=64)
    sent = _sent(TenantPolicy(tenant="acme", limits=limits, cache=public))
    assert sent.cache_public == PublicHead(tools=0, system=1)
    assert sent.cache_salt
    plain = _sent(TenantPolicy(tenant="acme", limits=limits))
    assert plain.cache_public == PublicHead(0, 0)
