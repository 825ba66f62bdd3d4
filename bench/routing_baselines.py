"""Baseline replica pickers (round-robin, least-loaded, session-hash, prefix-only) that the
benchmarks and tests compare with Lantern's own, injected through `routing.types.ReplicaPicker`.

Pure: each takes the pick's inputs and returns one replica of the eligible subset; no state, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from routing.decision import lantern_pick
from routing.types import PickInputs, ReplicaPicker


def round_robin(inputs: PickInputs) -> tuple[int, str]:
    return inputs.subset[inputs.seq % len(inputs.subset)], "round_robin"


def least_loaded(inputs: PickInputs) -> tuple[int, str]:
    reps = inputs.replicas
    best = min(
        inputs.subset,
        key=lambda i: (reps[i].inflight_requests, reps[i].inflight_tokens, reps[i].key),
    )
    return best, "least_loaded"


def _rendezvous_weight(session_id: str, key: str) -> bytes:
    return hashlib.blake2b(f"{session_id}\x00{key}".encode(), digest_size=8).digest()


def session_hash(inputs: PickInputs) -> tuple[int, str]:
    """Rendezvous (highest-random-weight) hashing: adding a replica to n moves about 1/(n+1)
    of the sessions, and only onto the new replica."""
    sid, reps = inputs.features.session_id, inputs.replicas
    return max(inputs.subset, key=lambda i: _rendezvous_weight(sid, reps[i].key)), "session_hash"


def prefix_only(inputs: PickInputs) -> tuple[int, str]:
    """Longest match; ties go to the fewest in-flight requests, then the lowest key."""
    reps, scores = inputs.replicas, inputs.scores
    best = min(
        inputs.subset,
        key=lambda i: (-scores[i].predicted_cached_tokens, reps[i].inflight_requests, reps[i].key),
    )
    return best, "prefix_only"


PICKERS: Mapping[str, ReplicaPicker] = {
    "lantern": lantern_pick,
    "round_robin": round_robin,
    "least_loaded": least_loaded,
    "session_hash": session_hash,
    "prefix_only": prefix_only,
}
