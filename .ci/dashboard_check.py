"""The Grafana dashboards in deploy/grafana/ are valid and query only the gateway's own metrics.

Checks each file's structure (a dashboard with a uid, a title, panels with a type, a grid
position and PromQL targets) and that every metric name its queries use is one /metrics of a
gateway built from a minimal config exposes. Run by `make check`.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path

from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
# the parts of a PromQL expression that hold label names or values, not metric names
_NOT_METRICS = re.compile(r'\{[^}]*\}|\[[^\]]*\]|\b(?:by|without|on|ignoring)\s*\([^)]*\)|"[^"]*"')
_PREFIXES = ("lantern_", "gen_ai_")


_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def exposed_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name /metrics can show, labelled series not yet observed included."""
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(family.name + s for s in _SUFFIXES.get(family.type, ()))
    return names


def gateway_registry() -> CollectorRegistry:
    sys.path.insert(0, str(ROOT))
    from bench.gateway_overhead import write_lantern_config
    from gateway.settings import load_settings
    from gateway.wiring import build_components

    tmp = Path(tempfile.mkdtemp(prefix="lantern-dashboard-"))
    settings = load_settings(write_lantern_config(tmp, "http://127.0.0.1:9"))
    return build_components(settings).metrics.registry


def metric_names(expr: str) -> set[str]:
    return {m for m in _IDENT.findall(_NOT_METRICS.sub(" ", expr)) if m.startswith(_PREFIXES)}


def problems(path: Path, exposed: set[str]) -> list[str]:
    doc = json.loads(path.read_text())
    out = [f"{path.name}: no {key}" for key in ("uid", "title", "panels") if not doc.get(key)]
    for i, panel in enumerate(doc.get("panels", [])):
        where = f"{path.name}: panel {i} ({panel.get('title', '?')})"
        out += [f"{where}: no {k}" for k in ("type", "title", "gridPos") if k not in panel]
        if panel.get("type") == "row":
            continue
        if not panel.get("targets"):
            out.append(f"{where}: no targets")
        for target in panel.get("targets", []):
            expr = target.get("expr", "")
            names = metric_names(expr)
            if not names:
                out.append(f"{where}: a target queries no gateway metric: {expr!r}")
            out += [f"{where}: {n} is not on /metrics" for n in sorted(names - exposed)]
    return out


def main() -> int:
    if not DASHBOARDS:
        print("no dashboards in deploy/grafana/")
        return 1
    exposed = exposed_names(gateway_registry())
    found = [p for path in DASHBOARDS for p in problems(path, exposed)]
    for p in found:
        print(p)
    print(f"dashboards: {len(DASHBOARDS)} checked, {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
