"""The `lantern` CLI: policy check exit codes and output, keys, dispatch, serve --demo."""

from __future__ import annotations

import argparse
import re
import stat
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.ledger.db import migrate
from gateway.settings import Settings
from policies.limits import LimitsPolicy
from policies.model import hash_api_key
from policies.store import PolicyStore

REPO = Path(__file__).resolve().parents[3]
GOOD = 'tenant: {t}\napi_keys:\n  - {{id: k1, sha256: "{h}"}}\nlimits:\n  tokens_per_minute: 10\n'


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LANTERN_CONFIG", "LANTERN_PORT", "LANTERN_HOST", "LANTERN_POLICY_DIR"):
        monkeypatch.delenv(name, raising=False)


def policies(tmp_path: Path) -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    for tenant in ("acme", "beta"):
        text = GOOD.format(t=tenant, h=hash_api_key(f"lt-{tenant}"))
        (folder / f"{tenant}.yaml").write_text(text, encoding="utf-8")
    return folder


def broken(folder: Path) -> None:
    (folder / "acme.yaml").write_text("tenant: acme\nlimits:\n  tokens_per_minute: x\n  rpm: 1\n")
    (folder / "beta.yaml").write_text("tenant: gamma\nmodels: 3\n")


EXPECTED_ERRORS = [
    "{d}/acme.yaml:3: limits.tokens_per_minute: "
    "Input should be a valid integer, unable to parse string as an integer",
    "{d}/acme.yaml:4: limits.rpm: unknown key (allowed: "
    + ", ".join(sorted(LimitsPolicy.model_fields))
    + ")",
    "{d}/beta.yaml:1: tenant: tenant 'gamma' does not match the file name (expected 'beta')",
    "{d}/beta.yaml:2: models: Input should be a valid list",
]


def test_policy_check_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = policies(tmp_path)
    assert main(["policy", "check", str(folder)]) == 0
    assert capsys.readouterr().out == "OK: 2 policy file(s), 2 API key(s)\n"
    assert main(["policy", "check", str(folder / "acme.yaml")]) == 0
    assert capsys.readouterr().out == "OK: 1 policy file(s), 1 API key(s)\n"


def test_policy_check_prints_every_error_of_every_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = policies(tmp_path)
    broken(folder)
    assert main(["policy", "check", str(folder / "acme.yaml"), str(folder / "beta.yaml")]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [line.format(d=folder) for line in EXPECTED_ERRORS]
    assert captured.err == "lantern policy check: 4 error(s) in 2 file(s)\n"


def test_policy_check_empty_directory_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "check", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "lantern policy check: no policy files found\n"


def test_policy_check_as_a_subprocess(tmp_path: Path) -> None:
    folder = policies(tmp_path)
    command = [sys.executable, "-m", "gateway.cli.main", "policy", "check", str(folder)]
    ok = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout) == (0, "OK: 2 policy file(s), 2 API key(s)\n")
    broken(folder)
    bad = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [line.format(d=folder) for line in EXPECTED_ERRORS]


def test_keys_create_prints_a_key_that_authenticates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["keys", "create", "--tenant", "acme", "--id", "k-ci"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "API key for tenant acme (shown once; Lantern stores only its sha256):"
    key = lines[1].strip()
    assert re.fullmatch(r"lt-[A-Za-z0-9_-]{40}", key)
    assert lines[2] == "Add this entry under `api_keys:` in acme.yaml:"
    assert lines[3] == f'  - {{id: k-ci, sha256: "{hash_api_key(key)}"}}'
    (tmp_path / "acme.yaml").write_text("tenant: acme\napi_keys:\n" + lines[3] + "\n")
    store = PolicyStore(tmp_path)
    store.reload_now()
    found = store.tenant_for_key(key)
    assert found is not None and (found[0].tenant, found[1]) == ("acme", "k-ci")


def test_keys_create_default_id_and_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--tenant", "acme"]) == 0
    assert re.fullmatch(
        r'  - \{id: k[0-9a-f]{8}, sha256: "[0-9a-f]{64}"\}', capsys.readouterr().out.splitlines()[3]
    )
    assert main(["keys", "create", "--tenant", "ACME"]) == 2
    assert main(["keys", "create", "--tenant", "acme", "--id", "a b"]) == 2


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["serve"],
        ["policy"],
        ["policy", "check"],
        ["keys"],
        ["keys", "create"],
        ["report"],
        ["report", "cost"],
        ["report", "breakeven"],
        ["cache"],
        ["cache", "explain"],
        ["engine"],
        ["engine", "serve"],
    ],
)
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(" ".join(["usage: lantern", *command]))


def test_missing_module_exits_2_with_a_clear_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "gateway.cli.cache_explain", None)
    assert main(["cache", "explain", "--session", "s1", "--tenant", "acme"]) == 2
    assert capsys.readouterr().err == (
        "lantern cache explain: not available (gateway.cli.cache_explain.cli_explain is missing)\n"
    )


def test_dispatch_passes_args_and_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[argparse.Namespace, Settings]] = []

    def cli_explain(args: argparse.Namespace, settings: Settings) -> int:
        calls.append((args, settings))
        return 3

    fake = types.ModuleType("gateway.cli.cache_explain")
    fake.cli_explain = cli_explain  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.cli.cache_explain", fake)
    config = tmp_path / "lantern.yaml"
    config.write_text("port: 9999\n")
    argv = ["cache", "explain", "--session", "s1", "--tenant", "acme", "--config", str(config)]
    assert main(argv) == 3
    ((args, settings),) = calls
    assert (args.session, args.tenant, settings.port) == ("s1", "acme", 9999)


def test_report_cost_arguments_reach_the_report(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[argparse.Namespace] = []
    fake = types.ModuleType("gateway.reports.cost")
    fake.cli_cost = lambda args, settings: seen.append(args) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.reports.cost", fake)
    argv = ["report", "cost", "--since", "2026-11-01", "--group-by", "tenant", "--group-by", "day"]
    assert main([*argv, "--format", "csv"]) == 0
    (args,) = seen
    assert (args.since, args.until, args.group_by, args.format) == (
        "2026-11-01",
        None,
        ["tenant", "day"],
        "csv",
    )


def test_engine_serve_passes_the_remaining_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    fake = types.ModuleType("selfhost.serve.server")
    fake.main = lambda argv: seen.append(argv) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "selfhost.serve.server", fake)
    argv = ["--model", "default", "--port", "9001", "--device", "cpu", "--max-num-seqs", "4"]
    assert main(["engine", "serve", *argv]) == 0
    assert seen == [argv]


def test_unknown_arguments_are_rejected_outside_engine_serve() -> None:
    with pytest.raises(SystemExit) as exited:
        main(["policy", "check", "x.yaml", "--strict"])
    assert exited.value.code == 2


def test_serve_demo_seeds_a_tenant_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[Settings] = []
    fake = types.ModuleType("gateway.app")
    fake.serve = lambda settings, workers: served.append(settings)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.app", fake)
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--demo", "--port", "8181"]) == 0
    (settings,) = served
    assert (settings.port, settings.models[0].name) == (8181, "smollm2")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "Lantern (demo) will listen on http://127.0.0.1:8181 once the bundled engine has loaded "
        "SmolLM2."
    )
    match = re.fullmatch(
        r"demo API key: (lt-[A-Za-z0-9_-]{40})   \(stored in var/demo.key\)", lines[1]
    )
    assert match is not None
    key = match.group(1)
    key_file = tmp_path / "var" / "demo.key"
    assert key_file.read_text() == key + "\n"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    store = PolicyStore(tmp_path / "var" / "policies")
    store.reload_now()
    found = store.tenant_for_key(key)
    assert found is not None and (found[0].tenant, found[1]) == ("demo", "demo")
    assert store.snapshot().errors == ()
    policy_bytes = (tmp_path / "var" / "policies" / "demo.yaml").read_bytes()
    assert main(["serve", "--demo"]) == 0  # a second run reuses the tenant and its key
    assert (
        capsys.readouterr().out.splitlines()[1] == f"demo API key: {key}   (stored in var/demo.key)"
    )
    assert (tmp_path / "var" / "policies" / "demo.yaml").read_bytes() == policy_bytes


def test_serve_demo_prints_an_admin_token_and_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    served: list[Settings] = []
    fake = types.ModuleType("gateway.app")
    fake.serve = lambda settings, workers=1: served.append(settings)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gateway.app", fake)
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "--demo"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"admin token: (lt-admin-\S+)   \(stored in var/admin.token\)", out)
    assert match is not None and "console: http://127.0.0.1:8080/console" in out
    (settings,) = served
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == match.group(1)
    token_file = tmp_path / "var" / "admin.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert main(["serve", "--demo"]) == 0  # the same token on every run
    assert match.group(1) in capsys.readouterr().out


def test_report_breakeven_runs_on_the_demo_out_of_the_box(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    migrate("sqlite:///./var/lantern.db")
    assert main(["report", "breakeven", "--demo"]) == 0
    captured = capsys.readouterr()
    assert "smollm2: the fleet served no hour in the window" in captured.err
    assert "model smollm2: 1 replica(s) over 0 h" in captured.out


def test_keys_create_says_tenant_ids_are_lowercase(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "create", "--tenant", "NEWTENANT"]) == 2
    assert "lowercase" in capsys.readouterr().err


def test_serve_with_an_invalid_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "lantern.yaml"
    config.write_text("port: 80\nlisten: all\n")
    assert main(["serve", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith(f"{config}:2: listen: unknown key (allowed: ")


def test_policy_check_against_the_server_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = policies(tmp_path)
    (folder / "beta.yaml").write_text(
        "tenant: beta\nmodels: [smollm2, gpt-5]\nbackends:\n  - smollm2-local\n  - gone\n"
    )
    config = tmp_path / "lantern.yaml"
    config.write_text(
        "models:\n  - name: smollm2\n    backends:\n"
        "      - {kind: selfhost, name: smollm2-local, model_path: default}\n"
    )
    assert main(["policy", "check", str(folder), "--config", str(config)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{folder}/beta.yaml:2: models[1]: no model named 'gpt-5' in the server config",
        f"{folder}/beta.yaml:5: backends[1]: no backend named 'gone' in the server config",
    ]
    assert main(["policy", "check", str(folder / "acme.yaml"), "--config", str(config)]) == 0


def test_policy_check_refuses_a_grant_of_an_undeclared_mcp_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = policies(tmp_path)
    (folder / "beta.yaml").write_text(
        "tenant: beta\nmcp_servers:\n  - orders\n  - {name: crm, deny: [drop]}\n"
    )
    config = tmp_path / "lantern.yaml"
    config.write_text("mcp_servers:\n  - {name: orders, url: 'http://127.0.0.1:9/mcp'}\n")
    assert main(["policy", "check", str(folder), "--config", str(config)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        f"{folder}/beta.yaml:4: mcp_servers[1]: no MCP server named 'crm' in the server config",
    ]
    # without the server's config the grants cannot be checked: said, not failed
    assert main(["policy", "check", str(folder)]) == 0
    assert capsys.readouterr().err == (
        "lantern policy check: warning: mcp_servers grants not checked against the declared "
        "servers (pass --config lantern.yaml)\n"
    )


def test_serve_workers_refuses_child_engines_and_a_zero_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--demo", "--workers", "0"]) == 1
    assert "--workers: at least 1" in capsys.readouterr().err
    # the demo starts the bundled engine as a child: one per worker would be wrong
    assert main(["serve", "--demo", "--workers", "2", "--port", "8182"]) == 1
    err = capsys.readouterr().err
    assert "start an engine child per process" in err and "lantern engine serve" in err
