"""The `tracing:` section of a tenant policy: what the gateway's spans may carry of the
tenant's calls beyond counts and outcomes.

Pure data; gateway/telemetry applies it when a call is traced.
"""

from __future__ import annotations

from policies.base import PolicyModel


class TracingPolicy(PolicyModel):
    # the prompt and the reply as the GenAI conventions' opt-in attributes
    # (gen_ai.system_instructions, gen_ai.input.messages, gen_ai.output.messages)
    record_content: bool = False
