"""Dollar holds are upper bounds of what a call settles at, cache writes of both TTLs included,
through a real gateway against the provider cache fake (which bills 1 h writes at 2x input)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry

from gateway.core.admission import Admission, AdmissionMetrics
from quotas.limits import usd_to_micro
from tests.adversarial.recording_store import RecordingStore
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.prompt_cache import PromptCacheFake
from tests.fakes.upstream import FakeUpstream

MODEL = "claude-sonnet-4-5"
KEYS = {"five": "lt-holds-five-key-0001", "hour": "lt-holds-hour-key-0001"}
# claude-sonnet-4-5 in LiteLLM's map, USD per token
INPUT, OUTPUT, READ = Decimal("3E-6"), Decimal("15E-6"), Decimal("3E-7")
WRITE_5M, WRITE_1H = Decimal("3.75E-6"), Decimal("6E-6")


class Clock:
    now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def stack(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[RunningGateway, PromptCacheFake, RecordingStore]]:
    store = RecordingStore()

    def recording(cls: type[Admission], settings: object, registry: object = None) -> Admission:
        return cls(store, metrics=AdmissionMetrics(CollectorRegistry()))

    monkeypatch.setattr(Admission, "from_settings", classmethod(recording))
    fake = PromptCacheFake(Clock())
    with FakeUpstream(cache=fake) as upstream:
        policies = tmp_path / "policies"
        policies.mkdir()
        write_policy(policies, "five", KEYS["five"], models=[MODEL], cache={"ttl": "5m"})
        write_policy(policies, "hour", KEYS["hour"], models=[MODEL], cache={"ttl": "1h"})
        backend = {
            "kind": "anthropic",
            "name": "fake",
            "base_url": upstream.base_url,
            "model": MODEL,
            "api_key_env": None,
            "timeout_s": 10,
        }
        config = write_config(
            tmp_path / "lantern.yaml", tmp_path, [{"name": MODEL, "backends": [backend]}]
        )
        gateway = start_gateway(config)
        try:
            yield gateway, fake, store
        finally:
            gateway.stop()


def conversation(turns: int, client_marker: str | None, topic: str) -> dict:
    messages: list[dict] = [{"role": "user", "content": "Plan the migration." + " p" * 200}]
    for t in range(1, turns):
        messages.append({"role": "assistant", "content": f"Step {t} done." + " s" * 150})
        messages.append({"role": "user", "content": f"Result {t}." + " r" * 300})
    system: list[dict] = [{"type": "text", "text": f"You are careful about {topic}." + " c" * 1400}]
    if client_marker is not None:
        system[0]["cache_control"] = {"type": "ephemeral", "ttl": client_marker}
    return {"model": MODEL, "max_tokens": 40, "system": system, "messages": messages}


def expected_micro_usd(uncached: int, read: int, write: int, write_1h: int, out: int) -> int:
    usd = (
        uncached * INPUT
        + read * READ
        + (write - write_1h) * WRITE_5M
        + write_1h * WRITE_1H
        + out * OUTPUT
    )
    return usd_to_micro(float(usd))


def test_holds_cover_cache_writes_at_both_ttls(
    stack: tuple[RunningGateway, PromptCacheFake, RecordingStore],
) -> None:
    gateway, fake, store = stack
    outputs: list[int] = []
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for tenant, marker in (("five", None), ("hour", None), ("five", "1h")):
            headers = {"x-api-key": KEYS[tenant], "x-session-id": f"s-{tenant}-{marker}"}
            for turns in (1, 2, 3):
                r = client.post(
                    "/v1/messages",
                    json=conversation(turns, marker, tenant + str(marker)),
                    headers=headers,
                )
                assert r.status_code == 200, r.text
                outputs.append(r.json()["usage"]["output_tokens"])
    settled = store.settled()
    assert len(settled) == len(fake.calls) == 9
    assert sum(c.write_1h for c in fake.calls[3:]) > 0  # 1 h writes happened (policy and client)
    assert sum(c.write - c.write_1h for c in fake.calls[:3]) > 0  # and 5-minute ones
    for held, call, out in zip(settled, fake.calls, outputs, strict=True):
        cost = expected_micro_usd(call.uncached, call.read, call.write, call.write_1h, out)
        assert held.settled_micro_usd == cost  # 1 h writes billed at the 1 h rate, to the micro-$
        assert held.hold_micro_usd >= cost
