"""The admin API's and the console's parameters as a careless admin or a script types them,
against a real gateway: every bad value is a 400 that names the parameter (JSON in OpenAI's
error shape on `/admin/*`, the console's page there), never a 500 or a 503."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from gateway.apikeys.records import KeyRecords, KeyRequest
from gateway.http.admin_keys import MAX_KEYS_PAGE
from gateway.ledger.db import create_ledger_engine, session_factory
from gateway.ledger.models import UsageRow
from gateway.ledger.usage_insert import insert_rows
from tests.e2e.conftest import models_for
from tests.e2e.harness import ADMIN_TOKEN, RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.upstream import FakeUpstream

ADMIN = {"authorization": f"Bearer {ADMIN_TOKEN}"}
FORM_TOKEN = re.compile(r'name="form_token" value="([0-9a-f]{32})"')
# a date-only `until` includes its day: the day after 9999-12-31 is no datetime; an offset can
# move an instant out of the years 1 to 9999 once it is read as UTC
OUT_OF_RANGE = [
    {"until": "9999-12-31"},
    {"since": "0001-01-01T00:00:00+01:00"},
    {"until": "9999-12-31T23:00:00-05:00"},
]


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    root = tmp_path_factory.mktemp("admin-queries")
    (root / "policies").mkdir()
    write_policy(root / "policies", "acme", "lt-acme-admin-queries-01")
    write_policy(root / "policies", "beta", "lt-beta-admin-queries-01")
    with FakeUpstream() as fake:
        running = start_gateway(write_config(root / "lantern.yaml", root, models_for(fake)))
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture(scope="module")
def console(gateway: RunningGateway) -> httpx.Client:
    client = httpx.Client(base_url=gateway.url, timeout=10)
    assert client.post("/console/login", data={"token": ADMIN_TOKEN}).status_code == 303
    return client


def bad_query(reply: httpx.Response, names: str, param: str) -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error",
        "bad_query",
        param,
    )
    assert re.match(names, error["message"]), error["message"]


@pytest.mark.parametrize("view", ["cost", "spend", "breakeven", "sessions"])
@pytest.mark.parametrize("params", OUT_OF_RANGE)
def test_a_period_out_of_range_is_a_400_on_every_report(
    gateway: RunningGateway, view: str, params: dict[str, str]
) -> None:
    reply = httpx.get(f"{gateway.url}/admin/reports/{view}", params=params, headers=ADMIN)
    bad_query(reply, "since|until", next(iter(params)))


@pytest.mark.parametrize("page", ["spend", "cache", "sessions", "breakeven"])
@pytest.mark.parametrize("params", OUT_OF_RANGE)
def test_a_period_out_of_range_is_a_400_on_every_console_page(
    console: httpx.Client, page: str, params: dict[str, str]
) -> None:
    reply = console.get(f"/console/{page}", params=params)
    assert reply.status_code == 400, reply.text
    assert "until:" in reply.text or "since:" in reply.text


@pytest.mark.parametrize("page", ["²", "x", "1" * 5000, "-1"])
def test_a_sessions_page_that_is_not_a_page_number_is_a_400(
    console: httpx.Client, page: str
) -> None:
    reply = console.get("/console/sessions", params={"page": page})
    assert reply.status_code == 400, reply.text
    assert "page: a page number from 1" in reply.text
    assert console.get("/console/sessions", params={"page": "2"}).status_code == 200


@pytest.mark.parametrize("group_by", [["session"], ["tenant,session"], ["day", "session"]])
def test_the_cost_view_has_no_unbounded_grouping(
    gateway: RunningGateway, group_by: list[str]
) -> None:
    """A row per session id the clients chose has no bound; the sessions view pages them."""
    params = {"group_by": group_by}
    reply = httpx.get(f"{gateway.url}/admin/reports/cost", params=params, headers=ADMIN)
    bad_query(reply, r"group_by: session .*/admin/reports/sessions", "group_by")
    params = {"group_by": ["day", "tenant,model"]}
    reply = httpx.get(f"{gateway.url}/admin/reports/cost", params=params, headers=ADMIN)
    assert reply.json()["group_by"] == ["day", "tenant", "model"]


@pytest.mark.parametrize(
    ("params", "named"),
    [({"limit": "abc"}, "limit"), ({"limit": "1e3"}, "limit"), ({"offset": "-5"}, "offset"),
     ({"offset": "²"}, "offset"), ({"limit": "9" * 5000}, "limit")],
)  # fmt: skip
def test_a_sessions_page_size_that_is_not_a_count_is_named(
    gateway: RunningGateway, params: dict[str, str], named: str
) -> None:
    reply = httpx.get(f"{gateway.url}/admin/reports/sessions", params=params, headers=ADMIN)
    bad_query(reply, f"{named}: a whole number", named)


@pytest.mark.parametrize(
    ("view", "params", "named", "says"),
    [("cost", {"group_by": "tenant,prompt"}, "group_by", "group_by: unknown group-by key 'prompt'"),
     ("cost", {"since": "2026-11-05", "until": "2026-11-04"}, "since", r"since \(.*\) must be before"),
     ("spend", {"since": "yesterday"}, "since", "since: 'yesterday' is not an ISO date"),
     ("breakeven", {"until": "soon"}, "until", "until: 'soon' is not an ISO date"),
     ("sessions", {"until": "2026-11-01T00:00:00+99:00"}, "until", "until: .* is not an ISO"),
     ("spend", {"dimension": "prompt"}, "dimension", "dimension: unknown dimension 'prompt'")],
)  # fmt: skip
def test_every_refused_report_names_its_parameter(
    gateway: RunningGateway, view: str, params: dict[str, str], named: str, says: str
) -> None:
    """The reports answered `param: null`: a script could not tell which value to fix."""
    reply = httpx.get(f"{gateway.url}/admin/reports/{view}", params=params, headers=ADMIN)
    bad_query(reply, says, named)


@pytest.mark.parametrize(
    "expires_at",
    ["2027-01-01T00:00:00", "0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-05:00"],
)
def test_an_expiry_without_an_offset_or_out_of_range_is_a_400(
    gateway: RunningGateway, expires_at: str
) -> None:
    """It reached the database and failed there: a 503 that said the ledger cannot be read."""
    issued = httpx.post(f"{gateway.url}/admin/keys", json={"tenant": "acme"}, headers=ADMIN).json()
    for path, body in (
        ("/admin/keys", {"tenant": "acme", "expires_at": expires_at}),
        (f"/admin/keys/{issued['id']}/expire", {"expires_at": expires_at}),
    ):
        reply = httpx.post(gateway.url + path, json=body, headers=ADMIN)
        assert reply.status_code == 400, (path, reply.text)
        assert reply.json()["error"]["code"] == "bad_key_request"
        assert reply.json()["error"]["message"].startswith("expires_at")
    listed = httpx.get(f"{gateway.url}/admin/keys", params={"tenant": "acme"}, headers=ADMIN)
    assert [k["expires_at"] for k in listed.json()["keys"] if k["id"] == issued["id"]] == [None]


@pytest.mark.parametrize(
    ("typed", "stored"),
    [
        ("2027-01-01T00:00:00+05:00", "2026-12-31T19:00:00+00:00"),  # the offset was dropped
        ("2027-01-01T00:00", "2027-01-01T00:00:00+00:00"),  # the form's own: UTC
    ],
)
def test_the_console_keeps_the_offset_of_an_expiry(
    gateway: RunningGateway, console: httpx.Client, typed: str, stored: str
) -> None:
    token = FORM_TOKEN.search(console.get("/console/keys").text)
    assert token is not None
    key_id = f"exp-{len(typed)}"
    form = {"form_token": token.group(1), "tenant": "acme", "id": key_id, "expires_at": typed}
    assert console.post("/console/keys", data=form).status_code == 200
    listed = httpx.get(f"{gateway.url}/admin/keys", params={"tenant": "acme"}, headers=ADMIN)
    assert [k["expires_at"] for k in listed.json()["keys"] if k["id"] == key_id] == [stored]


def test_the_sessions_pages_follow_one_another_in_their_period(
    gateway: RunningGateway, console: httpx.Client
) -> None:
    """The next-page link was `?page=2` on every page, and dropped the period: page 3 was out
    of reach, and page 2 showed the month to date instead of the period asked for."""
    rows = [
        UsageRow(id=f"00000000-0000-0000-0000-{n:012d}", ts=datetime(2026, 11, 2, 10, n, tzinfo=UTC),
                 tenant="acme", key_id="k1", session_id=f"s-{n:02d}", model="gpt-4o-mini",
                 cost_usd=f"{60 - n}.00", status="ok", latency_ms=1.0, request_id=f"r-{n}")
        for n in range(55)
    ]  # fmt: skip
    engine = create_ledger_engine(gateway.settings.database_url)
    insert_rows(engine, rows)
    engine.dispose()
    link: str | None = "?since=2026-11-01&until=2026-11-30"
    seen: list[list[str]] = []
    while link is not None and len(seen) < 4:  # three pages, and one more where links loop
        page = console.get("/console/sessions" + html.unescape(link))
        assert page.status_code == 200, page.text
        seen.append(re.findall(r"<td>(s-\d\d)</td>", page.text))
        found = re.search(r'<a href="([^"]+)" id="next">', page.text)
        link = found.group(1) if found else None
    assert seen == [
        [f"s-{n:02d}" for n in range(start, min(start + 25, 55))] for start in (0, 25, 50)
    ]


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"budget_usd": "-5", "budget_window": "day"},
         "budget_usd: Input should be greater than or equal to 0"),
        ({"expires_at": "next friday"},
         "expires_at: a date and time, e.g. 2026-12-31T00:00 (Invalid isoformat string: 'next friday')"),
    ],
)  # fmt: skip
def test_the_console_names_the_field_of_a_bad_key_form(
    console: httpx.Client, fields: dict[str, str], says: str
) -> None:
    token = FORM_TOKEN.search(console.get("/console/keys").text)
    assert token is not None
    form = {"form_token": token.group(1), "tenant": "acme", **fields}
    reply = console.post("/console/keys", data=form)
    assert reply.status_code == 400
    error = re.search(r'<p class="error" id="error">([^<]*)</p>', reply.text)
    assert error is not None
    assert html.unescape(error.group(1)) == says


def test_the_keys_listing_pages_with_a_cap(gateway: RunningGateway) -> None:
    """It sent every key ever issued (revoked and expired ones stay) in one reply."""
    url = f"{gateway.url}/admin/keys"
    for tenant, key_id in [("beta", "b1"), ("acme", "page-1"), ("acme", "page-2"), ("beta", "b2")]:
        issued = httpx.post(url, json={"tenant": tenant, "id": key_id}, headers=ADMIN)
        assert issued.status_code == 201, issued.text
    everything = httpx.get(url, headers=ADMIN).json()
    assert everything["next_after"] is None
    named = [f"{k['tenant']}/{k['id']}" for k in everything["keys"]]
    assert len(named) >= 4
    paged: list[str] = []
    params: dict[str, str] = {"limit": "2"}
    while len(paged) <= len(named):
        page = httpx.get(url, params=params, headers=ADMIN).json()
        paged += [f"{k['tenant']}/{k['id']}" for k in page["keys"]]
        assert len(page["keys"]) <= 2
        if page["next_after"] is None:
            break
        params["after"] = page["next_after"]
    assert paged == named
    for bad in ({"limit": "0"}, {"limit": "1001"}, {"limit": "x"}, {"after": "acme"}):
        reply = httpx.get(url, params=bad, headers=ADMIN)
        assert reply.status_code == 400, (bad, reply.text)
        assert reply.json()["error"]["message"].startswith(next(iter(bad)) + ":")


def test_the_console_keys_page_shows_one_listing_page(tmp_path: Path) -> None:
    """A gateway of its own: 1,001 keys, where the page rendered every key ever issued."""
    (tmp_path / "policies").mkdir()
    write_policy(tmp_path / "policies", "acme", "lt-acme-admin-queries-02")
    with FakeUpstream() as fake:
        running = start_gateway(write_config(tmp_path / "lantern.yaml", tmp_path, models_for(fake)))
        try:
            engine = create_ledger_engine(running.settings.database_url)
            # past one listing page, and so past the tenant's default bound on live keys
            records = KeyRecords(
                session_factory(engine), lambda: datetime.now(UTC), MAX_KEYS_PAGE + 1
            )
            for n in range(MAX_KEYS_PAGE + 1):
                records.issue(KeyRequest("acme", f"bulk-{n:04d}"), "test")
            engine.dispose()
            client = httpx.Client(base_url=running.url, timeout=30)
            assert client.post("/console/login", data={"token": ADMIN_TOKEN}).status_code == 303
            page = client.get("/console/keys").text
        finally:
            running.stop()
    assert page.count('<tr id="key-bulk-') == MAX_KEYS_PAGE
    assert 'id="key-bulk-0999"' in page and 'id="key-bulk-1000"' not in page
    assert 'id="more-keys"' in page


def test_the_console_shows_an_expired_key_as_expired(
    gateway: RunningGateway, console: httpx.Client
) -> None:
    """An expired key, refused at every door, was listed as "active"."""
    url = f"{gateway.url}/admin/keys"
    for key_id, expires_at in (("gone", "2020-01-01T00:00:00Z"), ("live", "2999-01-01T00:00:00Z")):
        body = {"tenant": "beta", "id": key_id, "expires_at": expires_at}
        assert httpx.post(url, json=body, headers=ADMIN).status_code == 201
    page = console.get("/console/keys").text
    for key_id, state in (("gone", "expired"), ("live", "active")):
        row = re.search(rf'<tr id="key-{key_id}">.*?</tr>', page, re.S)
        assert row is not None
        states = re.findall(r">(active|expired|revoked)</td>", row.group(0))
        assert states == [state], key_id


def test_a_report_by_key_and_day_is_bounded(gateway: RunningGateway, console: httpx.Client) -> None:
    """A row per key per day over any period was sent whole: 101 keys x 100 days is past the
    bound (MAX_VIEW_ROWS), a 400 that asks for a shorter period; 99 days are within it."""
    days = [datetime(2025, 3, 1, 12, tzinfo=UTC) + timedelta(days=d) for d in range(100)]
    rows = [
        UsageRow(id=f"00000000-0000-0000-0001-{n:012d}", ts=ts, tenant="beta", key_id=f"k-{k:03d}",
                 model="gpt-4o-mini", request_id=f"bound-{n}", status="ok", cost_usd=Decimal("0.01"))
        for n, (ts, k) in enumerate((ts, k) for ts in days for k in range(101))
    ]  # fmt: skip
    engine = create_ledger_engine(gateway.settings.database_url)
    insert_rows(engine, rows)
    engine.dispose()
    period = {"since": "2025-03-01", "until": "2025-06-08"}  # 100 days
    too_many = "since: this period holds 10,100 (rows|amounts)"
    for view, params in (("cost", {"group_by": "key,day"}), ("spend", {"dimension": "key"})):
        url = f"{gateway.url}/admin/reports/{view}"
        reply = httpx.get(url, params={**period, **params}, headers=ADMIN)
        assert reply.status_code == 400, reply.text[:300]
        error = reply.json()["error"]
        assert (error["code"], error["param"]) == ("report_too_large", "since")
        assert re.match(too_many, error["message"]), error["message"]
    shorter = {**period, "until": "2025-06-07", "group_by": "key,day"}
    reply = httpx.get(f"{gateway.url}/admin/reports/cost", params=shorter, headers=ADMIN)
    assert len(reply.json()["rows"]) == 99 * 101
    page = console.get("/console/spend", params={**period, "dimension": "key"})
    assert page.status_code == 400
    assert "since: this period holds 10,100 amounts" in html.unescape(page.text)
    assert console.get("/console/cache", params=period).status_code == 200  # a row a day
