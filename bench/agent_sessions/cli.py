"""Command line of the agent-session bench: the forced-miss and messy-client tables, with
Lantern in-process or through a real gateway. Run: python -m bench.agent_sessions
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench.agent_sessions.gateway_hop import GatewayBench
from bench.agent_sessions.hops import NORMALISED, Direct, HopFactory, InProcessLantern
from bench.agent_sessions.runs import messy_table, miss_calls, miss_table
from bench.agent_sessions.session import MODEL


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.agent_sessions", description=__doc__)
    parser.add_argument("--via", choices=("inprocess", "gateway"), default="gateway")
    args = parser.parse_args()
    if args.via == "inprocess":
        report(args.via, InProcessLantern.factory(NORMALISED), lambda fake, clock: Direct(fake))
        return
    with tempfile.TemporaryDirectory() as var_dir:
        bench = GatewayBench(Path(var_dir))
        try:
            report(args.via, bench.factory("lantern"), bench.factory("raw"))
        finally:
            bench.close()


def report(via: str, lantern: HopFactory, passthrough: HopFactory) -> None:
    print(f"Lantern hop: {via}; model {MODEL}; prices: uncached 1, read 0.1, write 1.25 (5 min)")
    print(
        "\nForced misses (clean session through Lantern; a miss = the 5-minute lifetime ran out)\n"
    )
    print("| misses | miss calls | measured | note | difference |\n| --- | --- | --- | --- | --- |")
    for m, measured, note in miss_table(lantern):
        calls = ", ".join(str(c) for c in sorted(miss_calls(m))) or "-"
        print(f"| {m} | {calls} | {measured:.2f} % | {note:.1f} % | {measured - note:+.2f} |")
    print(
        "\nMessy clients (cost relative to no caching; Lantern's x-lantern-cache verdicts for calls 1-19)\n"
    )
    print(
        "| client | passed through | verdicts | with Lantern | verdicts |\n| --- | --- | --- | --- | --- |"
    )
    for row in messy_table(passthrough, lantern):
        print(
            f"| {row.client} | {row.passed_through.percent:.2f} % | {row.passthrough_diagnoses} "
            f"| {row.with_lantern.percent:.2f} % | {row.lantern_diagnoses} |"
        )
