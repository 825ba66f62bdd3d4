"""The composition root: every long-lived part of one gateway process built from its settings.

`build_components` and `GatewayProcess` (process.py) are the one import; the usage ledger is
built in `ledger.py`, the other parts below the pipeline in `parts.py`, the pipeline and what
rides on it in `pipeline.py`.
"""

from __future__ import annotations

from gateway.wiring.ledger import LEDGER_LINGER_S
from gateway.wiring.process import GatewayProcess, build_components

__all__ = ["LEDGER_LINGER_S", "GatewayProcess", "build_components"]
