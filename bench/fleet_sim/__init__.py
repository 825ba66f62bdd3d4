"""Trace-driven fleet simulator: agent sessions replayed against N replicas, each with a real
content-addressed block LRU of fixed capacity and the step-time model of the note (A3), routed
by Lantern's own `gateway.fleet.routing_port.Fleet` under each strategy. CPU only, deterministic per seed.
"""

from bench.fleet_pool import Pool
from bench.fleet_sim.cli import STRATEGIES, main, size_kv
from bench.fleet_sim.oracle import ORACLES, OracleIndex
from bench.fleet_sim.simulation import Simulation
from bench.fleet_sim.state import Replica, Req, Session, SimConfig

__all__ = [
    "ORACLES",
    "STRATEGIES",
    "OracleIndex",
    "Pool",
    "Replica",
    "Req",
    "Session",
    "SimConfig",
    "Simulation",
    "main",
    "size_kv",
]
