"""Route prices from settings: the `prices` override per model, web searches included."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from adapters.types import Usage
from gateway.core.models_table import RoutePricing
from gateway.settings import load_settings

CONFIG = """\
prices:
  claude: {input: 3, output: 15, web_search: 0.02}
models:
  - name: claude
    backends:
      - {kind: anthropic, name: a, model: claude-sonnet-4-5, api_key_env: null}
  - name: sonnet
    backends:
      - {kind: anthropic, name: b, model: claude-sonnet-4-5, api_key_env: null}
"""


def test_a_web_search_is_priced_per_search_and_overridable(tmp_path: Path) -> None:
    config = tmp_path / "lantern.yaml"
    config.write_text(CONFIG)
    pricing = RoutePricing.from_settings(load_settings(config))
    assert pricing.price("claude").web_search == Decimal("0.02")
    assert pricing.price("sonnet").web_search == Decimal("0.01")  # $10 per 1,000
    searched = Usage(input_tokens=1000, output_tokens=100, web_search_requests=2)
    # 1000 x $3 + 100 x $15 per Mtok, and two searches
    assert pricing.cost_usd("claude", searched) == 0.0045 + 0.04
    assert pricing.cost_usd("sonnet", searched) == 0.0045 + 0.02
    assert pricing.uncached_cost_usd("sonnet", searched) == 0.0045 + 0.02
