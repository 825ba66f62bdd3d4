"""Wire shapes: request parsing into sampling params, prompts, and the Prometheus text."""

from __future__ import annotations

from selfhost.engine.llm_engine import EngineStats
from selfhost.engine.sequence import SamplingParams
from selfhost.serve.metrics import render_metrics
from selfhost.serve.protocol import ChatRequest, CompletionRequest


def test_chat_request_maps_to_sampling_params() -> None:
    body = ChatRequest.model_validate(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                }
            ],
            "temperature": 0,
            "max_completion_tokens": 9,
            "stop": "END",
            "seed": 3,
            "logprobs": True,
            "top_logprobs": 2,
            "cache_salt": "t",
            "unknown_field": 1,
        }
    )
    assert body.text_messages() == [{"role": "user", "content": "ab"}]
    assert body.sampling_params(256, body.num_logprobs()) == SamplingParams(
        temperature=0.0, max_tokens=9, seed=3, stop=("END",), logprobs=2
    )
    assert body.cache_salt == "t"


def test_completion_prompts() -> None:
    assert CompletionRequest(prompt="hi").prompt_text_or_ids() == "hi"
    assert CompletionRequest(prompt=["a", "b"]).prompt_text_or_ids() == "ab"
    assert CompletionRequest(prompt=[5, 6]).prompt_text_or_ids() == [5, 6]
    assert CompletionRequest(prompt="x").sampling_params(16, None).max_tokens == 16


def test_metrics_text() -> None:
    stats = EngineStats(
        num_running=2,
        num_waiting=1,
        kv_usage=0.25,
        prefix_query_tokens=200,
        prefix_hit_tokens=50,
        num_preemptions=3,
        prompt_tokens_total=150,
        generation_tokens_total=40,
        tokens_per_s=12.5,
        num_kv_blocks=1024,
    )
    lines = render_metrics(stats, "m").splitlines()
    assert 'selfhost_kv_cache_usage_perc{model_name="m"} 0.25' in lines
    assert 'selfhost_num_requests_running{model_name="m"} 2.0' in lines
    assert 'selfhost_num_requests_waiting{model_name="m"} 1.0' in lines
    assert 'selfhost_prefix_cache_hit_rate{model_name="m"} 0.25' in lines
    assert 'selfhost_num_preemptions_total{model_name="m"} 3.0' in lines
    assert 'selfhost_tokens_per_second{model_name="m"} 12.5' in lines
    assert 'selfhost_kv_cache_total_blocks{model_name="m"} 1024.0' in lines
    assert "# TYPE selfhost_num_preemptions_total counter" in lines
    assert len(lines) == 33
