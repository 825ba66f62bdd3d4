"""The openai SDK's `responses.input_items.list` against a running gateway: a continued
response lists its whole input, newest first, each item with the id it keeps along the chain,
paged by the SDK's own cursor; another tenant's id is a 404, a bad query a 400 naming it."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.e2e.conftest import ACME_KEY, OTHER_KEY
from tests.e2e.harness import RunningGateway
from tests.openapi.openai_schema import check


def _oai(gw: RunningGateway, key: str = ACME_KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)


def test_a_continued_response_lists_its_whole_input(gateway: RunningGateway) -> None:
    client = _oai(gateway)
    first = client.responses.create(model="gpt-4o-mini", input="hello words:2")
    second = client.responses.create(
        model="gpt-4o-mini",
        previous_response_id=first.id,
        input=[{"role": "user", "content": "more words:3"}],
    )
    hello_id = f"msg_{first.id.removeprefix('resp_')}_in0"
    more_id = f"msg_{second.id.removeprefix('resp_')}_in2"
    listed = client.responses.input_items.list(second.id, include=["reasoning.encrypted_content"])
    items = [item.to_dict() for item in listed]
    assert items == [
        {"id": more_id, "type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "more words:3"}]},
        first.output[0].to_dict(),  # the first reply's message, as its output had it
        {"id": hello_id, "type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "hello words:2"}]},
    ]  # fmt: skip
    # the first response lists its own input alone, under the same id
    assert [item.id for item in client.responses.input_items.list(first.id)] == [hello_id]
    # the SDK's paging: one item a page, oldest first, by `after` and `has_more`
    pages = client.responses.input_items.list(second.id, limit=1, order="asc")
    assert [item.id for item in pages] == [hello_id, first.output[0].id, more_id]
    raw = httpx.get(
        f"{gateway.url}/v1/responses/{second.id}/input_items",
        params={"limit": 2},
        headers={"authorization": f"Bearer {ACME_KEY}"},
    )
    check("ResponseItemList", raw.json())
    assert (raw.json()["first_id"], raw.json()["last_id"]) == (more_id, first.output[0].id)
    assert raw.json()["has_more"] is True


def test_input_items_are_the_tenants_own(gateway: RunningGateway) -> None:
    client = _oai(gateway)
    mine = client.responses.create(model="gpt-4o-mini", input="hello words:2")
    unstored = client.responses.create(model="gpt-4o-mini", input="hi words:2", store=False)
    for key, response_id in ((OTHER_KEY, mine.id), (ACME_KEY, unstored.id)):
        with pytest.raises(openai.NotFoundError) as err:
            list(_oai(gateway, key).responses.input_items.list(response_id))
        assert err.value.body == {
            "message": f"Response with id '{response_id}' not found.",
            "type": "invalid_request_error",
            "param": None,
            "code": "response_not_found",
        }
    unauthenticated = httpx.get(f"{gateway.url}/v1/responses/{mine.id}/input_items")
    assert unauthenticated.status_code == 401


@pytest.mark.parametrize(
    ("query", "param"),
    [({"limit": 0}, "limit"), ({"limit": 101}, "limit"), ({"order": "newest"}, "order"),
     ({"after": "msg_not_here"}, "after")],
)  # fmt: skip
def test_a_bad_query_is_a_400_naming_it(
    gateway: RunningGateway, query: dict[str, object], param: str
) -> None:
    client = _oai(gateway)
    mine = client.responses.create(model="gpt-4o-mini", input="hello words:2")
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.input_items.list(mine.id, extra_query=query)
    assert err.value.body["param"] == param  # type: ignore[index]
    assert err.value.body["type"] == "invalid_request_error"  # type: ignore[index]
