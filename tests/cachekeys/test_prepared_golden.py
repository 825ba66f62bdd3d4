"""Everything `prepare` hands downstream, for a corpus of bodies and tenant policies, equals
the recorded output (golden/prepared.json, SHA-256 per field): the body's exact bytes, the typed
request field by field, keys, hashes and fingerprint. Through the port, its memos change nothing
call after call, and its cache autopilot leaves the prefix hashes and salt as recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.wire.codec import codec_for
from gateway.core.prompt_cache import PromptCachePort, TiktokenEncoder, prepare
from tests.cachekeys import prompt_corpus as corpus
from tests.cachekeys.prepared_view import prepared_view

SECRET = b"golden-secret"
ENCODER = TiktokenEncoder()
GOLDEN = json.loads((Path(__file__).parent / "golden" / "prepared.json").read_text())


def _decoded(name: str) -> tuple[str, dict, object]:
    wire, body = corpus.body(name)
    codec = codec_for(wire)
    return wire, body, codec.decode_request(body)


@pytest.mark.parametrize(("case", "name", "policy", "isolate"), corpus.cases())
def test_prepare_matches_the_recorded_output(
    case: str, name: str, policy: str, isolate: bool
) -> None:
    wire, body, request = _decoded(name)
    tenant = corpus.tenant(policy)
    got = prepare(
        wire, body, request, tenant.cache, tenant.tenant, SECRET, ENCODER, isolate=isolate
    )  # type: ignore[arg-type]
    assert prepared_view(got) == GOLDEN[case]


@pytest.mark.parametrize(("case", "name", "policy", "isolate"), corpus.cases())
def test_the_port_matches_the_recorded_output_call_after_call(
    case: str, name: str, policy: str, isolate: bool
) -> None:
    wire, _, request = _decoded(name)
    models = frozenset({request.model}) if isolate else frozenset()  # type: ignore[attr-defined]
    port = PromptCachePort(SECRET, encoder=ENCODER, shared_cache_models=models)
    views = []
    for _ in range(2):  # the second call reuses the first one's layout
        wire, body, request = _decoded(name)
        got = port.prepare(wire, body, request, corpus.tenant(policy), request.model)  # type: ignore[arg-type,attr-defined]
        views.append(prepared_view(got))
    # the memos change nothing; the cache autopilot steers markers and the session root, never
    # the prefix hashes or the salt
    assert views[1] == views[0]
    for field in ("prefix_hashes", "cache_salt"):
        assert views[0][field] == GOLDEN[case][field]
