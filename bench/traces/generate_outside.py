"""Writes bench/traces/outside/: agent sessions in the shape real frameworks send them.

Run once (`python -m bench.traces.generate_outside`); seeded, so a rerun writes the same files.
Each file is one session, xz-compressed JSONL: one line per call with the client's body
(`body`), the same call with a prefix stable from the first call (`stable`), the round it is
sent in (calls of one round go at once; the rounds of a group go in order; a group is one
session, or two tenants' twin sessions taking turns), the tenant and the route (`anthropic`:
Anthropic door to an Anthropic upstream; `openai`: OpenAI door to an OpenAI upstream;
`translated`: OpenAI door to an Anthropic upstream). Shares no code with
bench/agent_sessions/traces.py on purpose: the replay must not be tuned to its own traces.
"""

from __future__ import annotations

import json
import lzma
from pathlib import Path

from bench.traces import outside_sessions as s
from bench.traces.outside_steps import Recorder

OUT = Path(__file__).resolve().parent / "outside"
SEED = 37


def recorders() -> list[Recorder]:
    return [
        s.code_agent(SEED),
        s.research_graph(SEED + 1),
        s.support_translated(SEED + 2),
        s.react_clock(SEED + 3),
        s.long_edit(SEED + 4),
        s.fanout(SEED + 5, "anthropic", "alpha", 5),
        s.fanout(SEED + 6, "openai", "beta", 4),
        s.twins(SEED + 7, "anthropic", 12),
        s.twins(SEED + 8, "openai", 12),
        s.twins(SEED + 9, "translated", 10),
    ]


def main() -> None:
    OUT.mkdir(exist_ok=True)
    for rec in recorders():
        for session, lines in rec.sessions.items():
            data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
            # preset 6 with a dictionary that holds a whole session: every call repeats the last
            filters = [{"id": lzma.FILTER_LZMA2, "preset": 6, "dict_size": 64 << 20}]
            (OUT / f"{session}.jsonl.xz").write_bytes(
                lzma.compress(data.encode(), format=lzma.FORMAT_XZ, filters=filters)
            )
            print(f"{session}: {len(lines)} calls, {len(data) // 1024} KiB")


if __name__ == "__main__":
    main()
