"""The deployment files are checked offline with the tools `make check` runs: hadolint on the
Dockerfile, kubernetes-validate (bundled schemas, strict) on the manifests, the compose spec on
the compose file; their embedded configuration and policies load with our own loaders; and a
ConfigMap edit, as the kubelet writes it (an atomic `..data` symlink swap), is hot reloaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.settings import load_settings
from policies.loader import check_paths
from policies.store import PolicyStore

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BIN = Path(sys.executable).parent


def run(tool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / tool), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def manifests(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if d]


def test_the_dockerfile_passes_hadolint_and_a_root_one_does_not(tmp_path: Path) -> None:
    ok = run("hadolint", "--config", DEPLOY / ".hadolint.yaml", DEPLOY / "Dockerfile")
    assert (ok.returncode, ok.stdout) == (0, "")
    rooted = tmp_path / "Dockerfile"
    rooted.write_text((DEPLOY / "Dockerfile").read_text() + "USER root\n")
    bad = run("hadolint", "--config", DEPLOY / ".hadolint.yaml", rooted)
    assert bad.returncode == 1 and "DL3002" in bad.stdout


def test_the_image_is_multi_stage_non_root_and_the_engine_optional() -> None:
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    assert sum(1 for line in lines if line.startswith("FROM ")) == 2
    assert [line for line in lines if line.startswith("USER ")][-1] == "USER 10001"
    assert "ARG WITH_ENGINE=false" in lines


def test_the_manifests_pass_strict_kubernetes_validation(tmp_path: Path) -> None:
    files = sorted((DEPLOY / "k8s").glob("*.yaml"))
    ok = run("kubernetes-validate", "--strict", "--quiet", *files)
    assert (ok.returncode, ok.stdout.strip()) == (0, "")
    broken = manifests("deployment.yaml")
    broken[0]["spec"]["template"]["spec"]["containers"][0]["livenessProb"] = {}
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(yaml.safe_dump_all(broken))
    assert run("kubernetes-validate", "--strict", "--quiet", bad_file).returncode != 0


def test_the_compose_file_passes_the_compose_spec(tmp_path: Path) -> None:
    ok = run("check-jsonschema", "--builtin-schema", "vendor.compose-spec", DEPLOY / "compose.yaml")
    assert ok.returncode == 0, ok.stdout
    doc = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = set(doc["services"])
    assert {"gateway", "redis", "postgres", "engine-a", "engine-b", "otel-collector"} <= services
    doc["services"]["gateway"]["stop_grace_period"] = ["45s"]
    bad = tmp_path / "compose.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert run("check-jsonschema", "--builtin-schema", "vendor.compose-spec", bad).returncode == 1


@pytest.fixture
def secrets_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ADMIN_TOKEN", "SERVER_SECRET"):
        monkeypatch.setenv(f"LANTERN_{name}", "x" * 32)
    monkeypatch.setenv("LANTERN_DATABASE_URL", "postgresql+psycopg://lantern@db/lantern")


def test_the_shipped_configurations_and_policies_load(tmp_path: Path, secrets_env: None) -> None:
    compose = load_settings(DEPLOY / "compose" / "lantern.yaml")
    assert compose.models[0].backends[0].base_urls() == (
        "http://engine-a:8000/v1",
        "http://engine-b:8000/v1",
    )
    config, policies = manifests("config.yaml")
    (tmp_path / "lantern.yaml").write_text(config["data"]["lantern.yaml"])
    k8s = load_settings(tmp_path / "lantern.yaml")
    assert (k8s.http.drain_grace_s, k8s.http.drain_timeout_s) == (5.0, 30.0)
    (tmp_path / "p").mkdir()
    for name, text in policies["data"].items():
        (tmp_path / "p" / name).write_text(text)
    loaded, issues = check_paths([tmp_path / "p"])
    assert ([p.policy.tenant for p in loaded], issues) == (["acme"], [])
    # the pod's grace period covers preStop, the readiness grace and the drain
    (deployment, _) = manifests("deployment.yaml")
    pod = deployment["spec"]["template"]["spec"]
    pre_stop = pod["containers"][0]["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + 5 + 30


def test_a_configmap_edit_is_hot_reloaded(tmp_path: Path) -> None:
    """The kubelet's atomic writer: files are symlinks through `..data`, which is swapped."""
    (_, policies) = manifests("config.yaml")
    text = policies["data"]["acme.yaml"]

    def version(n: int, tokens: int) -> None:
        folder = tmp_path / f"..v{n}"
        folder.mkdir()
        (folder / "acme.yaml").write_text(text.replace("200000", str(tokens)))
        os.symlink(folder.name, tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")

    version(1, 200000)
    os.symlink("..data/acme.yaml", tmp_path / "acme.yaml")
    store = PolicyStore(tmp_path, poll_interval_s=60)
    store.reload_now()
    before = store.get("acme")
    version(2, 1234)
    store.reload_now()
    after = store.get("acme")
    assert before is not None and after is not None
    assert (before.limits.tokens_per_minute, after.limits.tokens_per_minute) == (200000, 1234)
