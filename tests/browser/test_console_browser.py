"""The console in a real headless Chromium (Debian's chromium + chromium-driver, `make chromium`),
driven by selenium: log in, see a seeded month on every page with charts drawn from the seeded
values, and a key issued in the console working on the API within 2 s and refused within 2 s of
its revocation. Screenshots of each page go to var/test-artifacts/console/."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.wait import WebDriverWait

from gateway.ledger.db import create_ledger_engine, migrate
from gateway.ledger.usage_insert import insert_rows
from tests.browser.seed import Seeded, month_of_traffic
from tests.e2e.conftest import models_for
from tests.e2e.harness import ADMIN_TOKEN, RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

ARTIFACTS = Path(__file__).resolve().parents[2] / "var" / "test-artifacts" / "console"
ACME_KEY = "lt-acme-browser-key-0001"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1400",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    (tmp_path / "policies").mkdir()
    seed = month_of_traffic(datetime.now(UTC))
    url = f"sqlite:///{tmp_path}/lantern.db"
    migrate(url)
    engine = create_ledger_engine(url)
    insert_rows(engine, seed.rows)
    engine.dispose()
    return seed


@pytest.fixture
def console_gateway(seeded: Seeded, tmp_path: Path) -> Iterator[RunningGateway]:
    write_policy(tmp_path / "policies", "acme", ACME_KEY, limits={"monthly_budget_usd": 200})
    write_policy(tmp_path / "policies", "other", "lt-other-browser-key-0002")
    with FakeUpstream() as fake:
        fleet = {
            "name": "fleet-model",
            "backends": [
                {"kind": "openai_compatible", "name": "fleet", "base_url": fake.openai_base_url,
                 "model": "fleet-model", "price_per_hour_usd": 12, "capacity_tok_s": 10638.9},
            ],
        }  # fmt: skip
        models = [m for m in models_for(fake) if m["name"] != "claude-via-litellm"]
        prices = {"fleet-model": {"input": 2.0, "output": 2.0}}
        config = write_config(tmp_path / "lantern.yaml", tmp_path, [*models, fleet], prices=prices)
        running = start_gateway(config)
        try:
            yield running
        finally:
            running.stop()


def values(driver: WebDriver, css: str) -> dict[str, list[float]]:
    """series name -> the numbers an SVG chart drew (its data-values)."""
    found = {}
    for element in driver.find_elements(By.CSS_SELECTOR, css):
        raw = element.get_attribute("data-values") or ""
        found[element.get_attribute("data-series") or ""] = [float(v) for v in raw.split(",") if v]
    return found


def shot(driver: WebDriver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def wait_for(check: Callable[[], bool], within_s: float = 2.0) -> None:
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < within_s, "not effective within 2 s"
        time.sleep(0.05)


def log_in(driver: WebDriver, url: str) -> None:
    driver.get(f"{url}/console")
    assert driver.current_url.endswith("/console/login")
    shot(driver, "login")
    driver.find_element(By.ID, "token").send_keys("not-the-token")
    driver.find_element(By.ID, "login").click()
    # a form post's navigation may still be under way when click() returns: wait for its page
    error = WebDriverWait(driver, 10).until(lambda d: d.find_elements(By.ID, "error"))
    assert error[0].text == "wrong admin token"
    driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
    driver.find_element(By.ID, "login").click()
    WebDriverWait(driver, 10).until(lambda d: d.current_url.endswith("/console/spend"))


def test_every_page_shows_the_seeded_month(
    browser: WebDriver, console_gateway: RunningGateway, seeded: Seeded
) -> None:
    url, since = console_gateway.url, f"since={seeded.since.date().isoformat()}"
    log_in(browser, url)
    browser.get(f"{url}/console/spend?dimension=tenant&{since}")
    drawn = values(browser, "svg.chart polyline.series")
    days = seeded.days()
    assert drawn["acme"] == [float(seeded.spend("acme", d)) for d in days]
    assert drawn["other"] == [0.5] * len(days)
    total = sum((r.cost_usd for r in seeded.rows), Decimal(0))
    assert browser.find_element(By.CSS_SELECTOR, "tr.total").text.split()[-1] == f"{total:,.2f}"
    shot(browser, "spend")

    browser.get(f"{url}/console/budgets")
    now = datetime.now(UTC)
    bars = values(browser, "svg.chart rect.bar")
    assert bars["acme"] == [float(seeded.month_to_date("acme", now))]
    assert "200.00" in browser.find_element(By.CSS_SELECTOR, "table.report").text
    shot(browser, "budgets")

    browser.get(f"{url}/console/cache?{since}")
    saved = values(browser, "svg.chart polyline.series")["saved"]
    assert saved == [float(seeded.spend("acme", d) + seeded.spend("other", d)) for d in days]
    shot(browser, "cache")

    browser.get(f"{url}/console/sessions?{since}")
    top = values(browser, "svg.chart rect.bar")
    assert len(top) == 10 and max(v[0] for v in top.values()) > 0
    shot(browser, "sessions")

    browser.get(f"{url}/console/breakeven?{since}")
    curves = values(browser, "svg.chart polyline.series")
    assert len(curves["u"]) == len(days) and all(0 < u <= 1 for u in curves["u"])
    assert all(0 < u <= 1 for u in curves["u*"])
    assert "fleet-model" in browser.find_element(By.CSS_SELECTOR, "table.report").text
    shot(browser, "breakeven")

    browser.get(f"{url}/console/spend?dimension=colour")
    assert "dimension: use tenant|model|backend|key" in browser.find_element(By.ID, "error").text

    browser.get(f"{url}/console/tenants")
    text = browser.find_element(By.CSS_SELECTOR, "table.report").text
    assert "acme" in text and "other" in text
    shot(browser, "tenants")


def test_a_console_key_works_within_2s_and_stops_within_2s_of_revocation(
    browser: WebDriver, console_gateway: RunningGateway
) -> None:
    url = console_gateway.url
    log_in(browser, url)
    browser.get(f"{url}/console/keys")
    browser.find_element(By.ID, "key-id").send_keys("web-key")
    browser.find_element(By.ID, "models").send_keys("gpt-4o-mini")
    browser.find_element(By.ID, "issue-button").click()
    # the form post's page (with the new secret) may not have loaded when click() returns
    secret = WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "new-key"))[0].text
    assert secret.startswith("lt-")
    shot(browser, "keys")

    def status() -> int:
        body = {
            "model": "gpt-4o-mini",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        }
        headers = {"authorization": f"Bearer {secret}"}
        return httpx.post(
            f"{url}/v1/chat/completions", json=body, headers=headers, timeout=10
        ).status_code

    wait_for(lambda: status() == 200)
    browser.get(f"{url}/console/keys")
    browser.find_element(By.ID, "revoke-web-key").click()
    wait_for(lambda: status() == 401)
    browser.get(f"{url}/console/keys")
    audit = browser.find_element(By.ID, "audit").text
    assert "key.revoke" in audit and "key.issue" in audit and "console" in audit
    shot(browser, "keys-revoked")

    browser.find_element(By.ID, "logout").click()  # a form post: the session ends server-side
    WebDriverWait(browser, 10).until(lambda d: d.current_url.endswith("/console/login"))
    browser.get(f"{url}/console/keys")
    assert browser.current_url.endswith("/console/login")
