"""The note's 20-call agent session (D1-D2) replayed through Lantern to the prompt-cache fake,
costed against no caching (uncached 1, read 0.1, write 1.25). Run: python -m bench.agent_sessions
"""

from bench.agent_sessions.cli import main, report
from bench.agent_sessions.gateway_hop import GatewayBench, GatewayHop
from bench.agent_sessions.hops import (
    NORMALISED,
    SECRET,
    Clock,
    Direct,
    Hop,
    HopFactory,
    InProcessLantern,
)
from bench.agent_sessions.runs import (
    EXPIRED_GAP_S,
    NOTE_TABLE,
    TOOL_TIME_S,
    MessyRow,
    RunResult,
    diagnoses,
    fresh,
    messy_table,
    miss_calls,
    miss_table,
    run_session,
)
from bench.agent_sessions.session import (
    FIRST_CONTEXT,
    MODEL,
    NUM_CALLS,
    STEP,
    SYSTEM,
    Body,
    Messy,
    Session,
)

__all__ = [
    "EXPIRED_GAP_S",
    "FIRST_CONTEXT",
    "MODEL",
    "NORMALISED",
    "NOTE_TABLE",
    "NUM_CALLS",
    "SECRET",
    "STEP",
    "SYSTEM",
    "TOOL_TIME_S",
    "Body",
    "Clock",
    "Direct",
    "GatewayBench",
    "GatewayHop",
    "Hop",
    "HopFactory",
    "InProcessLantern",
    "Messy",
    "MessyRow",
    "RunResult",
    "Session",
    "diagnoses",
    "fresh",
    "main",
    "messy_table",
    "miss_calls",
    "miss_table",
    "report",
    "run_session",
]
