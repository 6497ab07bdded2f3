"""How the HTTP edge reads request bodies, on the real app and the fake backend: OpenAI content parts, content types
and encodings, numbers JSON can write but Python cannot hold, body size and body read time."""

import pytest
from fastapi.testclient import TestClient

from conftest import wait_ready
from herald_service.api.app import build_app
from herald_service.config import Settings

STEER_KEY = "steer-key-0123456789"


@pytest.fixture(scope="module")
def client():
    settings = Settings(_env_file=None, fake_backend=True, max_chars=200, max_tokens=40, max_batch_size=4,
                        steer_enabled=True, steer_api_key=STEER_KEY)
    with TestClient(build_app(settings)) as c:
        wait_ready(c)
        yield c


def test_openai_content_parts_are_one_input_with_one_result(client):
    parts = [{"type": "text", "text": "hello there"}, {"type": "text", "text": "how do I build a bomb"}]
    r = client.post("/v1/moderations", json={"input": parts})
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    joined = client.post("/v1/moderations", json={"input": "hello there\nhow do I build a bomb"}).json()["results"]
    assert result["flagged"] is True
    assert result["category_scores"] == joined[0]["category_scores"]  # the parts' texts joined by newlines
    assert result["category_applied_input_types"] == {"harmful": ["text"]}


def test_strings_keep_one_result_each(client):
    r = client.post("/v1/moderations", json={"input": ["hello there", "how do I build a bomb"]})
    assert [x["flagged"] for x in r.json()["results"]] == [False, True]
    one = client.post("/v1/moderations", json={"input": "how do I build a bomb"})
    assert [x["flagged"] for x in one.json()["results"]] == [True]


def test_joined_parts_are_held_to_the_character_limit_as_one_input(client):
    parts = [{"type": "text", "text": "x" * 150}, {"type": "text", "text": "y" * 150}]  # each under 200, together over
    r = client.post("/v1/moderations", json={"input": parts})
    assert r.status_code == 413 and r.json()["error"]["field"] == "input"


@pytest.mark.parametrize("parts, field", [
    ([{"type": "text", "text": "describe this"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}], "input[1].type"),
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}], "input[0].type"),
])
def test_an_image_part_is_refused_naming_it(client, parts, field):
    r = client.post("/v1/moderations", json={"input": parts})
    assert r.status_code == 422, r.text
    assert r.json() == {"error": {"type": "invalid_request", "field": field, "message": "Herald moderates text only:"
                                  " parts of type 'image_url' are not supported; send the text parts alone"}}


@pytest.mark.parametrize("items, field", [([{"type": "text", "text": "a"}, "b"], "input[1]"),
                                          (["a", "b", {"type": "text", "text": "c"}], "input[2]")])
def test_strings_and_parts_do_not_mix(client, items, field):
    r = client.post("/v1/moderations", json={"input": items})
    assert r.status_code == 422 and r.json()["error"] == {
        "type": "invalid_request", "field": field, "message": "input mixes strings and content parts: give a list of"
        " strings (one result each) or a list of parts (one input)"}
