"""Policy YAML → TenantPolicy: exact values, and golden error messages with exact lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.errors import PolicyFileError, PolicyIssue
from policies.limits import LimitsPolicy
from policies.loader import check_paths, load_policy_file, load_policy_text, parse_yaml
from policies.model import hash_api_key
from policies.routing import RoutingPolicy

KEY_HASH = hash_api_key("lt-test-key")
LIMITS_KEYS = ", ".join(sorted(LimitsPolicy.model_fields))  # limits.py is another helper's

VALID = f"""\
# a tenant
tenant: acme
name: ACME Corp
api_keys:
  - {{id: k1, sha256: "{KEY_HASH}"}}
models: [gpt-4o-mini, smollm2]
limits:
  tokens_per_minute: 60000
  max_output_tokens: 1024
  on_max_tokens_over: clamp
cache: {{scope: tenant, ttl: 1h}}
routing: {{venue: selfhost_only}}
tools:
  - name: search
    command: [python, -m, search]
    egress: [api.example.com]
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def issues_of(text: str, file: str = "acme.yaml") -> list[str]:
    with pytest.raises(PolicyFileError) as caught:
        load_policy_text(text, file, expected_tenant="acme")
    return [str(issue) for issue in caught.value.issues]


def test_valid_policy_loads_every_section() -> None:
    loaded = load_policy_text(VALID, "acme.yaml", expected_tenant="acme")
    policy = loaded.policy
    assert policy.tenant == "acme"
    assert policy.name == "ACME Corp"
    assert [(k.id, k.sha256) for k in policy.api_keys] == [("k1", KEY_HASH)]
    assert policy.models == ("gpt-4o-mini", "smollm2")
    assert policy.limits.tokens_per_minute == 60000
    assert policy.limits.max_output_tokens == 1024
    assert policy.limits.on_max_tokens_over == "clamp"
    assert policy.limits.requests_per_minute is None
    assert (policy.cache.scope, policy.cache.ttl) == ("tenant", "1h")
    assert policy.routing.venue == "selfhost_only"
    assert policy.tools[0].command == ("python", "-m", "search")
    assert policy.tools[0].limits.wall_s == 30
    assert (loaded.line_of("api_keys[0].sha256"), loaded.line_of("limits.max_output_tokens")) == (
        5,
        9,
    )
    assert loaded.line_of("tools[0].egress[0]") == 16


def test_unknown_key_names_line_field_and_suggestion() -> None:
    text = "tenant: acme\nlimits:\n  tokens_per_minute: 10\n  token_per_minute: 5\n"
    assert issues_of(text) == [
        "acme.yaml:4: limits.token_per_minute: unknown key (did you mean 'tokens_per_minute'? "
        f"allowed: {LIMITS_KEYS})"
    ]


def test_nested_aliases_cost_their_size_not_their_expansion() -> None:
    """A "billion laughs": 7 levels of 9 aliases stand for 9**7 (4.8 million) values in 8 lines.
    The line marks were walked once per value reached (a few more levels and the policy poller
    never finished, holding the reload lock); now once per node written."""
    lines = ["tenant: acme", "models: &a0 [m, m, m, m, m, m, m, m, m]"]
    lines += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 7)]
    text = "\n".join(lines) + "\n"
    assert len(parse_yaml(text, "acme.yaml").value_lines) == 1 + 1 + 7 * 10
    assert issues_of(text)[0].startswith("acme.yaml:3: x1: unknown key")
    doc = parse_yaml("tenant: acme\nmodels: &m [a, b]\nbackends: *m\n", "acme.yaml")
    assert doc.line_of(("backends",)) == 3 and doc.line_of(("models", 1)) == 2


def test_tracing_records_no_text_unless_opted_in_and_knows_its_keys() -> None:
    def load(text: str) -> bool:
        policy = load_policy_text(text, "acme.yaml", expected_tenant="acme").policy
        return policy.tracing.record_content

    assert load("tenant: acme\n") is False
    assert load("tenant: acme\ntracing:\n  record_content: true\n") is True
    assert issues_of("tenant: acme\ntracing:\n  record_text: true\n") == [
        "acme.yaml:3: tracing.record_text: unknown key (did you mean 'record_content'? "
        "allowed: record_content)"
    ]


def test_unknown_top_level_key() -> None:
    assert issues_of("tenant: acme\n\nquota: 5\n") == [
        "acme.yaml:3: quota: unknown key (allowed: api_keys, backends, cache, limits, mcp_servers, "
        "models, name, routing, tenant, tool_runs, tools, tracing)"
    ]


def test_a_routing_strategy_is_not_a_tenant_setting() -> None:
    """Baseline pickers are benchmark wiring (bench/routing_baselines.py), not policy."""
    text = "tenant: acme\nrouting:\n  venue: cheapest\n  strategy: round_robin\n"
    allowed = ", ".join(sorted(RoutingPolicy.model_fields))
    assert issues_of(text) == [f"acme.yaml:4: routing.strategy: unknown key (allowed: {allowed})"]


def test_wrong_type_names_line_of_value() -> None:
    text = "tenant: acme\nlimits:\n  requests_per_minute: lots\n"
    assert issues_of(text) == [
        "acme.yaml:3: limits.requests_per_minute: "
        "Input should be a valid integer, unable to parse string as an integer"
    ]


def test_scalar_where_list_expected() -> None:
    assert issues_of("tenant: acme\nmodels: 5\n") == [
        "acme.yaml:2: models: Input should be a valid list"
    ]


def test_bad_sha256_points_at_the_key_entry() -> None:
    text = 'tenant: acme\napi_keys:\n  - id: k1\n    sha256: "ABC"\n'
    assert issues_of(text) == [
        "acme.yaml:4: api_keys[0].sha256: must be 64 lowercase hex digits "
        "(the sha256 of the key; see `lantern keys create`)"
    ]


def test_duplicate_yaml_key_is_an_error() -> None:
    text = "tenant: acme\nlimits:\n  tokens_per_minute: 10\n  tokens_per_minute: 20\n"
    assert issues_of(text) == [
        "acme.yaml:4: limits.tokens_per_minute: duplicate key 'tokens_per_minute' (first at line 3)"
    ]


def test_multi_error_file_reports_every_error_in_line_order() -> None:
    text = (
        "tenant: acme\n"  # 1
        "limits:\n"  # 2
        "  tokens_per_minute: -5\n"  # 3
        "  max_prompt: 10\n"  # 4
        "api_keys:\n"  # 5
        "  - {id: k1, sha256: nothex}\n"  # 6
        "  - {id: k2}\n"  # 7
        "backends:\n"  # 8
        "  - [a]\n"  # 9
        "routing: fast\n"  # 10
        "name: a\n"  # 11
        "name: b\n"  # 12
    )
    assert issues_of(text) == [
        "acme.yaml:3: limits.tokens_per_minute: Input should be greater than or equal to 1",
        "acme.yaml:4: limits.max_prompt: unknown key (did you mean 'max_prompt_tokens'? "
        f"allowed: {LIMITS_KEYS})",
        "acme.yaml:6: api_keys[0].sha256: must be 64 lowercase hex digits "
        "(the sha256 of the key; see `lantern keys create`)",
        "acme.yaml:7: api_keys[1].sha256: missing required key",
        "acme.yaml:9: backends[0]: Input should be a valid string",
        "acme.yaml:10: routing: Input should be a mapping",
        "acme.yaml:12: name: duplicate key 'name' (first at line 11)",
    ]


def test_missing_field_in_list_item_and_tool() -> None:
    text = "tenant: acme\ntools:\n  - name: t\n    runner: local\n"
    assert issues_of(text) == ["acme.yaml:3: tools[0].command: missing required key"]


def test_duplicate_key_ids_and_hashes_within_a_tenant() -> None:
    other = hash_api_key("other")
    text = (
        "tenant: acme\n"
        "api_keys:\n"
        f'  - {{id: k1, sha256: "{KEY_HASH}"}}\n'
        f'  - {{id: k1, sha256: "{other}"}}\n'
        f'  - {{id: k3, sha256: "{KEY_HASH}"}}\n'
    )
    assert issues_of(text) == [
        "acme.yaml:4: api_keys[1].id: duplicate id (also in api_keys[0])",
        "acme.yaml:5: api_keys[2].sha256: duplicate sha256 (also in api_keys[0])",
    ]


def test_tenant_must_match_file_name() -> None:
    assert issues_of("# x\ntenant: acme2\n") == [
        "acme.yaml:2: tenant: tenant 'acme2' does not match the file name (expected 'acme')"
    ]


def test_invalid_tenant_id() -> None:
    with pytest.raises(PolicyFileError) as caught:
        load_policy_text("tenant: Acme Corp\n", "x.yaml")
    assert caught.value.issues == (
        PolicyIssue(
            "x.yaml",
            1,
            "tenant",
            "must be 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit",
        ),
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "",
            "acme.yaml:1: (document): expected a mapping with at least `tenant:`, got an empty file",
        ),
        ("- a\n", "acme.yaml:1: (document): expected a mapping with at least `tenant:`, got list"),
        (
            "tenant: acme\nlimits: {a: 1\n",
            "acme.yaml:3: (document): invalid YAML: while parsing a flow mapping, "
            "expected ',' or '}', but got '<stream end>'",
        ),
        (
            "tenant: acme\n---\ntenant: b\n",
            "acme.yaml:2: (document): invalid YAML: expected a single document in the stream, "
            "but found another document",
        ),
    ],
)
def test_document_level_errors(text: str, expected: str) -> None:
    assert issues_of(text) == [expected]


def test_error_exposes_first_issue_fields() -> None:
    with pytest.raises(PolicyFileError) as caught:
        load_policy_text("tenant: acme\nmodels: 5\n", "acme.yaml")
    error = caught.value
    assert (error.file, error.line, error.field, error.reason) == (
        "acme.yaml",
        2,
        "models",
        "Input should be a valid list",
    )


def test_load_policy_file_checks_the_name(tmp_path: Path) -> None:
    path = write(tmp_path, "acme.yaml", VALID)
    assert load_policy_file(path).policy.tenant == "acme"
    wrong = write(tmp_path, "acme.yml", VALID)
    with pytest.raises(PolicyFileError) as caught:
        load_policy_file(wrong)
    assert str(caught.value) == f"{wrong}:1: (document): a policy file name must end in .yaml"


def test_check_paths_rejects_a_key_hash_shared_across_tenants(tmp_path: Path) -> None:
    write(tmp_path, "acme.yaml", VALID)
    beta = f'tenant: beta\napi_keys:\n  - id: b1\n    sha256: "{KEY_HASH}"\n'
    write(tmp_path, "beta.yaml", beta)
    write(tmp_path, "notes.txt", "ignored")
    loaded, issues = check_paths([tmp_path])
    assert [item.policy.tenant for item in loaded] == ["acme"]
    assert [str(issue) for issue in issues] == [
        f"{tmp_path}/beta.yaml:4: api_keys[0].sha256: key hash already used by tenant 'acme' "
        f"({tmp_path}/acme.yaml:5)"
    ]


def test_check_paths_reports_missing_path(tmp_path: Path) -> None:
    loaded, issues = check_paths([tmp_path / "nope.yaml"])
    assert loaded == []
    assert [str(i) for i in issues] == [
        f"{tmp_path}/nope.yaml:1: (document): no such file or directory"
    ]
