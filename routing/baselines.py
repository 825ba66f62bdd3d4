"""Baseline replica pickers behind the router's interface (round-robin, least-loaded,
session-hash, prefix-only), kept so benchmarks and tests compare them with Lantern's policy.

Pure: each takes the eligible replicas and their scores and returns one; no state, no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from routing.types import CandidateScore, ReplicaState, RequestFeatures


def round_robin(replicas: Sequence[ReplicaState], seq: int) -> int:
    return seq % len(replicas)


def least_loaded(replicas: Sequence[ReplicaState]) -> int:
    return min(
        range(len(replicas)),
        key=lambda i: (replicas[i].inflight_requests, replicas[i].inflight_tokens, replicas[i].key),
    )


def _rendezvous_weight(session_id: str, key: str) -> bytes:
    return hashlib.blake2b(f"{session_id}\x00{key}".encode(), digest_size=8).digest()


def session_hash(replicas: Sequence[ReplicaState], features: RequestFeatures) -> int:
    """Rendezvous (highest-random-weight) hashing: adding a replica to n moves about 1/(n+1)
    of the sessions, and only onto the new replica."""
    return max(
        range(len(replicas)),
        key=lambda i: _rendezvous_weight(features.session_id, replicas[i].key),
    )


def prefix_only(replicas: Sequence[ReplicaState], scores: Sequence[CandidateScore]) -> int:
    """Longest match; ties go to the fewest in-flight requests, then the lowest key."""
    return min(
        range(len(replicas)),
        key=lambda i: (
            -scores[i].predicted_cached_tokens,
            replicas[i].inflight_requests,
            replicas[i].key,
        ),
    )
