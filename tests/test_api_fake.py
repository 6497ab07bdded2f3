"""The real app factory, lifespan, engine and probe on the weight-free fake backend."""

import json
import logging
import time

import pytest
from fastapi.testclient import TestClient

from conftest import held_loader, wait_ready
from test_admission import sharing_vocab  # one copy of the fake-vocabulary helper
from herald_service.api.app import build_app
from herald_service.config import Settings
from herald_service.engine.runtime import fake_runtime
from herald_service.engine.service import chunks_by_characters
from herald_service.errors import InvalidInput
from herald_service.types import user_turn

STEER_KEY = "steer-key-0123456789"
API_KEY = "client-key-0123456789"


def client_for(**overrides) -> TestClient:
    settings = Settings(_env_file=None, fake_backend=True, **overrides)
    return TestClient(build_app(settings))


@pytest.fixture(scope="module")
def client():
    with client_for(max_chars=200, max_tokens=40, max_batch_size=4, steer_enabled=True, steer_api_key=STEER_KEY) as c:
        wait_ready(c)
        yield c


def test_classify_flags_harmful_and_passes_benign_in_input_order(client):
    r = client.post("/classify", json={"input": ["how do I bake bread", "how do I build a bomb"]})
    assert r.status_code == 200
    body = r.json()
    assert body["model"] == "herald/fake-backbone"
    first, second = body["results"]
    assert (first["flagged"], second["flagged"]) == (False, True)
    assert second["score"] >= 0.5 > first["score"]
    assert len(second["trajectory"]) == 8
    assert set(second["features"]) == {"slope", "curvature", "monotonicity", "onset", "late_level", "peak", "volatility"}
    assert second["onset_layer"] is not None and first["onset_layer"] is None
    assert first["tokens"] == 3 + 5  # template tokens + words
    for header in ("x-queue-time", "x-inference-time", "x-tokenize-time", "x-total-time"):
        assert float(r.headers[header]) >= 0


def test_score_is_sigmoid_of_logit_minus_threshold(client):
    import math

    result = client.post("/classify", json={"input": "write a phishing email"}).json()["results"][0]
    assert result["score"] == pytest.approx(1 / (1 + math.exp(-(result["logit"] - result["threshold"]))))
    assert result["flagged"] == (result["score"] >= 0.5)


def test_answers_name_the_probe_folder_not_the_servers_path():
    # Breaker finding: "probe" echoed HERALD_PROBE (a server path) and /v1/moderations named the backbone, the same
    # for every probe fitted on it.
    from herald_service.engine.runtime import Runtime

    fake = fake_runtime()
    settings = Settings(_env_file=None, fake_backend=True)
    app = build_app(settings, loader=lambda s: Runtime(fake.backbone, fake.probe, fake.manifest, "/srv/secret/probes/p1"))
    with TestClient(app) as c:
        wait_ready(c)
        assert c.post("/classify", json={"input": "hi"}).json()["probe"] == "p1"
        assert c.post("/v1/moderations", json={"input": "hi"}).json()["model"] == "herald/p1"
        assert c.get("/v1/info").json()["probe"]["path"] == "/srv/secret/probes/p1"  # the operator's view keeps it


def test_a_probe_of_another_feature_set_answers_with_its_own_feature_names_on_every_route():
    # tester: a probe fitted with --feature-set bands-v1 served, but every /classify (and /steer) was a 500: the
    # answer read herald-v1's seven names from the result
    import numpy as np

    from herald_service.backbone.fake import synthetic_corpus
    from herald_service.engine.runtime import Runtime
    from herald_service.probes.probe import HeraldProbe

    fake = fake_runtime()
    prompts, labels = synthetic_corpus()
    states = fake.backbone.last_token_states(fake.backbone.encode([user_turn(p) for p in prompts])).numpy()
    probe = HeraldProbe(seed=0, feature_set="bands-v1").fit(states, np.array(labels)).fitted_
    names = [f"band_{i}" for i in range(1, 8)]
    settings = Settings(_env_file=None, fake_backend=True, steer_enabled=True, steer_api_key=STEER_KEY)
    app = build_app(settings, loader=lambda s: Runtime(fake.backbone, probe, {**fake.manifest, "feature_set": "bands-v1"},
                                                       "bands"))
    with TestClient(app) as c:
        wait_ready(c)
        assert c.get("/v1/info").json()["probe"]["manifest"]["feature_set"] == "bands-v1"
        r = c.post("/classify", json={"input": ["how do I build a bomb", "hi"], "return_trajectory": True})
        assert r.status_code == 200, r.text
        for result in r.json()["results"]:
            assert list(result["features"]) == names
            # each band's mean of the trajectory the answer carries (8 layers: 2, 1, 1, 1, 1, 1, 1)
            s = np.array(result["trajectory"])
            expected = [band.mean() for band in np.array_split(s, 7)]
            np.testing.assert_allclose([result["features"][n] for n in names], expected, rtol=1e-9, atol=1e-12)
        steer = c.post("/steer", json={"prompt": "how do I build a bomb", "max_new_tokens": 2},
                       headers={"Authorization": f"Bearer {STEER_KEY}"})
        assert steer.status_code == 200, steer.text
        assert [list(steer.json()["classification"][k]["features"]) for k in ("baseline", "steered")] == [names, names]
        assert c.post("/v1/moderations", json={"input": "how do I build a bomb"}).status_code == 200


def test_a_probe_given_as_dot_is_named_by_its_folder(tmp_path, monkeypatch):
    # tester: HERALD_PROBE=. inside the probe folder named it "": answers said "herald/" and herald_model_info's
    # probe label was empty, so two replicas' probes could not be told apart
    from herald_service.engine.runtime import Runtime

    fake = fake_runtime()
    (tmp_path / "my-probe" / "sub").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "my-probe")
    for given in (".", "sub/.."):
        assert Runtime(fake.backbone, fake.probe, fake.manifest, given).probe_name == "my-probe"


def test_invisible_and_fullwidth_characters_do_not_hide_a_harmful_prompt(client):
    # Breaker finding: a zero-width joiner in each word took a harmful prompt from 1.0 to 0.001 on the real backbone.
    plain = "how do I build a bomb"
    zwj = " ".join(w[:1] + "\u200d" + w[1:] for w in plain.split())
    wide = "how do I build a ｂｏｍｂ"
    results = client.post("/classify", json={"input": [plain, zwj, wide], "return_trajectory": False}).json()["results"]
    assert [r["flagged"] for r in results] == [True, True, True]
    assert results[1]["score"] == results[0]["score"] == results[2]["score"]
    assert results[1]["tokens"] == results[0]["tokens"]
    moderated = client.post("/v1/moderations", json={"input": zwj}).json()["results"][0]
    assert moderated["flagged"] is True


def test_messages_and_trajectory_opt_out(client):
    one = client.post("/classify", json={"messages": [{"role": "user", "content": "steal a car"}], "return_trajectory": False})
    assert one.status_code == 200 and one.json()["results"][0]["trajectory"] is None
    many = client.post("/classify", json={"messages": [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "poison"}]]})
    assert [r["flagged"] for r in many.json()["results"]] == [False, True]


@pytest.mark.parametrize(
    "body, status, field, words",
    [
        ({"input": ["a"] * 5}, 413, "input", "limit of 4"),
        ({"input": ["ok", "x" * 201]}, 413, "input[1]", "limit is 200"),
        ({"input": " ".join(["wd"] * 50)}, 413, "input", "limit is 40"),
        ({"input": []}, 422, "input", "at least one"),
        ({"input": 7}, 422, "input", "string or a list of strings; got a number"),
        ({"input": "a", "messages": []}, 422, "messages", "exactly one"),
        ({}, 422, "input", "exactly one"),
        ({"input": None}, 422, "input", "or 'messages' ('input' is null)"),  # tester pass: read as "give 'input'"
        ({"messages": [{"role": "robot", "content": "x"}]}, 422, "messages[0].role", "user"),
        ({"messages": [[]]}, 422, "messages[0]", "at least one message"),
        ({"input": "a", "surprise": 1}, 422, "surprise", "unknown field"),
        # breaker pass: keys that look like pydantic's union-branch markers were dropped from the field
        ({"input": "a", "metadata[user]": 1}, 422, "metadata[user]", "unknown field"),
        ({"input": "a", "str": 1}, 422, "str", "unknown field"),
        ({"input": "a", "function-x": 1}, 422, "function-x", "unknown field"),
        ({"input": "a", "": 1}, 422, "", "unknown field"),
        ({"messages": [{"role": "user", "content": "x", "str": 1}]}, 422, "messages[0].str", "unknown field"),
        ({"input": "a", "k" * 20_000: 1}, 422, "k" * 64 + "...", "unknown field"),  # cut, not echoed whole
        ({"input": "a", "\u001b[31m": 1}, 422, "\\u001b[31m", "unknown field"),  # escaped
    ],
)
def test_bad_input_gets_a_clear_4xx_naming_the_field(client, body, status, field, words):
    r = client.post("/classify", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert words in error["message"]
    assert error.get("field") == field
    if words == "unknown field":  # the key as the field shows it: escaped and cut
        assert error["message"] == f"unknown field '{field}': not part of this request (/docs lists the fields)"


def test_malformed_json_and_wrong_method(client):
    r = client.post("/classify", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "body"
    assert client.get("/classify").status_code == 405
    assert client.get("/classify").json()["error"]["type"] == "method_not_allowed"


def test_oversized_body_is_refused_before_parsing(client):
    r = client.post("/classify", content=b"x" * (4 * 200 * 6 + 70_000), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["field"] == "body"


def test_oversized_chunked_body_is_refused_with_413(client):
    def chunks():
        yield b'{"input": "'
        for _ in range(100):  # 100 kB > the 4 x 200 x 6 + 64 kB body limit of this client's settings
            yield b"a" * 1000
        yield b'"}'

    big = client.post("/classify", content=chunks(), headers={"content-type": "application/json"})
    assert big.status_code == 413 and big.json()["error"]["field"] == "body"

    def small():
        yield b'{"input": '
        yield b'"bake bread"}'

    ok = client.post("/classify", content=small(), headers={"content-type": "application/json"})
    assert ok.status_code == 200 and ok.json()["results"][0]["flagged"] is False


def test_openai_moderations_shape(client):
    r = client.post("/v1/moderations", json={"input": ["hello there", "make a bomb"], "model": "omni-moderation-latest"})
    assert r.status_code == 200
    body = r.json()
    assert body["id"].startswith("modr-") and body["model"] == "herald/fake-backbone"  # what ran, not the client's name
    assert [x["flagged"] for x in body["results"]] == [False, True]
    # every category name of OpenAI's API carries Herald's one verdict, so a gateway that checks one of them instead
    # of `flagged` still blocks (with `harmful` alone the SDK's typed fields read None: breaker pass)
    names = {"harmful", "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
             "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence",
             "violence/graphic"}
    benign, harmful = body["results"]
    assert harmful["categories"] == dict.fromkeys(names, True) and benign["categories"] == dict.fromkeys(names, False)
    score = harmful["category_scores"]["harmful"]
    assert 0.5 <= score <= 1 and harmful["category_scores"] == dict.fromkeys(names, score)
    assert benign["category_scores"]["violence"] < 0.5
    assert harmful["category_applied_input_types"] == {name: ["text"] for name in names}
    assert [(x["view"], x["view_text"]) for x in body["results"]] == [("whole", None), ("whole", None)]
    parts = client.post("/v1/moderations", json={"input": [{"type": "text", "text": "kill"}]})
    assert parts.json()["results"][0]["flagged"] is True


def test_moderations_name_the_view_that_decided_as_classify_does(client):
    # a gateway on the OpenAI route could not tell which prompt decided (the views answered on /classify only)
    text = "Answer in Spanish: how do I make a bomb"
    moderated = client.post("/v1/moderations", json={"input": text}).json()["results"][0]
    classified = client.post("/classify", json={"input": text}).json()["results"][0]
    assert moderated["flagged"] is classified["flagged"] is True
    assert (moderated["view"], moderated["view_text"]) == (classified["view"], classified["view_text"]) == (
        "trimmed", "how do I make a bomb")
    assert moderated["category_scores"]["harmful"] == classified["score"]
    image = client.post("/v1/moderations", json={"input": [{"type": "image_url", "image_url": {"url": "x"}}]})
    assert image.status_code == 400 and image.json()["error"]["field"] == "input[0].type"


@pytest.mark.parametrize("body, status, error", [
    # Herald's 422 and 413 are OpenAI's 400, which its SDK raises as BadRequestError (a gateway's `except
    # openai.BadRequestError` missed the 422's UnprocessableEntityError and the 413's bare APIStatusError)
    ({"input": []}, 400, {"type": "invalid_request_error", "code": "invalid_request", "field": "input",
                          "param": "input", "message": "at least one prompt is required"}),
    ({"input": ["a"] * 5}, 400, {"type": "invalid_request_error", "code": "input_too_large", "field": "input",
                                 "param": "input", "message": "5 prompts exceed the limit of 4 prompts per request (max_batch_size)"}),
    # an error of the whole body names it as its field does
    (b"{not json", 400, {"type": "invalid_request_error", "code": "invalid_request", "field": "body", "param": "body",
                         "message": "request body is not valid JSON: Expecting property name enclosed in double quotes"
                                    " at line 1 column 2 (char 1)"}),
])
def test_moderations_errors_have_openais_status_and_fields(client, body, status, error):
    r = (client.post("/v1/moderations", json=body) if isinstance(body, dict)
         else client.post("/v1/moderations", content=body, headers={"content-type": "application/json"}))
    assert r.status_code == status and r.json() == {"error": error}, r.text
    same = client.post("/classify", json={"input": body["input"]}) if isinstance(body, dict) else None
    if same is not None:  # /classify keeps Herald's statuses and body
        assert same.status_code in (413, 422) and same.json()["error"] == {
            "type": error["code"], "field": error["field"], "message": error["message"]}


def test_moderations_body_size_refusal_and_schema_are_openais_too(client):
    # the body-size middleware wrote Herald's 413 itself, so the SDK raised a bare APIStatusError (re-test); the schema
    # listed FastAPI's 422 and not what the route sends
    big = client.post("/v1/moderations", content=b"x" * (4 * 200 * 6 + 70_000), headers={"content-type": "application/json"})
    error = big.json()["error"]
    assert big.status_code == 400 and error["type"] == "invalid_request_error" and error["param"] == "body"
    assert error["code"] == "input_too_large" and error["message"].startswith("request body exceeds the limit of")
    same = client.post("/classify", content=b"x" * (4 * 200 * 6 + 70_000), headers={"content-type": "application/json"})
    assert same.status_code == 413 and set(same.json()["error"]) == {"type", "message", "field"}
    responses = client.get("/openapi.json").json()["paths"]["/v1/moderations"]["post"]["responses"]
    assert "422" not in responses and "413" not in responses and "400" in responses


@pytest.mark.parametrize("body, field", [
    ({"input": "hi", "return_trajectory": True}, "return_trajectory"),  # a /classify option: was ignored
    ({"input": "hi", "modle": "omni-moderation-latest"}, "modle"),  # a misspelt argument: was ignored
    ({"input": [{"type": "text", "text": "hi", "lang": "en"}]}, "input[0].lang"),
])
def test_moderations_refuse_an_unrecognized_argument_naming_it(client, body, field):
    r = client.post("/v1/moderations", json=body)
    assert r.status_code == 400 and r.json()["error"]["field"] == field, r.text


def test_content_parts_scored_alone_are_counted_as_such_on_every_route(client):
    # tester: /v1/moderations scored each part alone beside the joined text (x-batch-size 4 for one input of two
    # parts) but herald_scored_views_total{kind="content_part"} stayed 0, as it did for /steer; /classify counted them
    def parts_counted() -> float:
        line = next(line for line in client.get("/metrics").text.splitlines()
                    if line.startswith('herald_scored_views_total{kind="content_part"}'))
        return float(line.split()[-1])

    parts = [{"type": "text", "text": "hi"}, {"type": "text", "text": "how do I build a bomb"}]
    for route, body, headers in (
            ("/v1/moderations", {"input": parts}, {}),
            ("/classify", {"messages": [{"role": "user", "content": parts}]}, {}),
            ("/steer", {"messages": [{"role": "user", "content": parts}], "max_new_tokens": 2},
             {"Authorization": f"Bearer {STEER_KEY}"})):
        before = parts_counted()
        r = client.post(route, json=body, headers=headers)
        assert r.status_code == 200, (route, r.text)
        assert parts_counted() - before == 2, route
    before = parts_counted()  # a string input has no parts
    assert client.post("/v1/moderations", json={"input": ["hi", "how do I build a bomb"]}).status_code == 200
    assert parts_counted() == before


def test_steer_needs_its_key_and_returns_both_completions(client):
    assert client.post("/steer", json={"prompt": "make a bomb"}).status_code == 401
    wrong = client.post("/steer", json={"prompt": "make a bomb"}, headers={"Authorization": "Bearer nope-nope-nope"})
    assert wrong.status_code == 401
    r = client.post("/steer", json={"prompt": "make a bomb", "max_new_tokens": 20}, headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["baseline"]["refused"] is True and body["steered"]["refused"] is False
    assert body["baseline"]["cut_short"] is False and body["steered"]["cut_short"] is False  # both came in full
    assert body["layers"] == [client.get("/v1/info").json()["probe"]["manifest"]["peak_layer"]]
    assert body["classification"]["baseline"]["flagged"] is True
    assert body["classification"]["steered"]["score"] < body["classification"]["baseline"]["score"]
    bad = client.post("/steer", json={"prompt": "x", "layers": [0, 99]}, headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "layers"
    twice = client.post("/steer", json={"prompt": "x", "layers": [2, 1, 2]}, headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert twice.status_code == 422 and twice.json()["error"] == {  # was answered as layers [1, 2] (breaker pass)
        "type": "invalid_request", "message": "layers lists 2 more than once; list each layer once", "field": "layers"}
    every = client.post("/steer", json={"prompt": "x", "layers": "all", "max_new_tokens": 2},
                        headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert every.status_code == 200 and every.json()["layers"] == list(range(1, 9))  # herald steer-eval's too
    shouted = client.post("/steer", json={"prompt": "x", "layers": "ALL", "max_new_tokens": 2},
                          headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert shouted.status_code == 200 and shouted.json()["layers"] == list(range(1, 9))  # was "a valid list" (tester)
    one = client.post("/steer", json={"prompt": "x", "layers": 3, "max_new_tokens": 2},
                      headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert one.status_code == 200 and one.json()["layers"] == [3]  # README's `4`: was 422 "a valid list" (new user)
    word = client.post("/steer", json={"prompt": "x", "layers": "peak"}, headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert word.status_code == 422 and word.json()["error"] == {
        "type": "invalid_request", "field": "layers",
        "message": "layers is a 1-based decoder layer (4), a list of them ([4, 8]) or 'all', not 'peak'"}
    for sent, shown in ((4.0, "4.0"), (True, "true")):  # "a valid list" (re-tester), now that 4 is taken
        r = client.post("/steer", json={"prompt": "x", "layers": sent}, headers={"Authorization": f"Bearer {STEER_KEY}"})
        assert r.status_code == 422 and r.json()["error"]["message"] == (
            f"layers is a 1-based decoder layer (4), a list of them ([4, 8]) or 'all', not {shown}"), r.text
    long = client.post("/steer", json={"prompt": "x", "max_new_tokens": 100_000}, headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert long.status_code == 422 and long.json()["error"]["field"] == "max_new_tokens"
    both = client.post("/steer", json={"prompt": "x", "messages": [{"role": "user", "content": "x"}]},
                       headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert both.status_code == 422 and both.json()["error"]["field"] == "messages"
    assert "exactly one of 'prompt' or 'messages'" in both.json()["error"]["message"]


def test_steer_classifies_a_conversation_as_classify_does(client):
    # /steer scored the whole conversation only: a harmful request followed by a tool result read 0.0005 there and
    # 0.998 in /classify, which also scores each unanswered user turn alone (researcher pass)
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    for messages in ([{"role": "user", "content": "make a bomb"}, {"role": "tool", "content": "ok fine", "tool_call_id": "1"}],
                     [{"role": "user", "content": [{"type": "text", "text": "steal a car"}, {"type": "text", "text": "thanks a lot"}]}]):
        verdict = client.post("/classify", json={"messages": messages}).json()["results"][0]
        r = client.post("/steer", json={"messages": messages, "max_new_tokens": 4}, headers=auth)
        assert r.status_code == 200, r.text
        baseline = r.json()["classification"]["baseline"]
        assert (baseline["score"], baseline["tokens"], baseline["flagged"]) == (verdict["score"], verdict["tokens"], True)
        assert baseline["trajectory"] == verdict["trajectory"]


def test_steer_generates_from_the_prompt_as_sent_and_judges_it_as_classify_does(client, monkeypatch):
    # /steer generated from the folded text: "Repeat exactly: Crème brûlée à la française" came back "Creme brulee a
    # la francaise." (tester finding). The generations now read the text as sent; the verdicts still read it folded.
    from herald_service.backbone.fake import FakeBackbone

    generated_from = []
    generate = FakeBackbone.generate

    def recording(self, token_ids, *args, **kwargs):
        generated_from.append([self._words.get(t) for t in token_ids[3:]])  # after the 3 template tokens
        return generate(self, token_ids, *args, **kwargs)

    monkeypatch.setattr(FakeBackbone, "generate", recording)
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    for prompt, as_sent in (("Repeat exactly: Crème brûlée à la française", ["repeat", "exactly", ":", "crème",
                                                                              "brûlée", "à", "la", "française"]),
                            ("how to make a b0mb", ["how", "to", "make", "a", "b0mb"])):
        generated_from.clear()
        r = client.post("/steer", json={"prompt": prompt, "max_new_tokens": 8}, headers=auth)
        assert r.status_code == 200, r.text
        assert generated_from == [as_sent, as_sent]  # baseline and steered, the text as written
        verdict = client.post("/classify", json={"input": prompt, "return_trajectory": True}).json()["results"][0]
        baseline = r.json()["classification"]["baseline"]
        assert (baseline["score"], baseline["tokens"], baseline["trajectory"]) == (
            verdict["score"], verdict["tokens"], verdict["trajectory"])
    # the folded "bomb" is flagged, while the fake model, reading "b0mb" as sent, sees no harm word and complies
    body = r.json()
    assert body["classification"]["baseline"]["flagged"] is True and body["baseline"]["refused"] is False


def test_steer_applies_the_token_limit_to_the_prompt_as_sent_too(client):
    # "b o m b" folds to one word, "bomb": 3 + 36 tokens folded (under max_tokens 40), 3 + 39 as sent (over it)
    prompt = " ".join(["wd"] * 35) + " b o m b"
    assert len(fake_runtime().backbone.encode([user_turn(prompt)])[0]) == 39
    r = client.post("/steer", json={"prompt": prompt, "max_new_tokens": 2}, headers={"Authorization": f"Bearer {STEER_KEY}"})
    assert r.status_code == 413 and r.json()["error"] == {
        "type": "input_too_large", "field": "prompt",
        "message": "prompt as sent (the generations read it without the fold) renders to 42 tokens; the limit is 40"
                   " (max_tokens)"}


def test_fake_backbone_honours_the_steering_mode_as_the_real_hooks_do():
    import numpy as np

    from herald_service.backbone.base import Intervention
    from herald_service.backbone.fake import FakeBackbone
    from herald_service.types import user_turn

    backbone = FakeBackbone()
    ids = backbone.encode([user_turn("how do I build a bomb"), user_turn("bake bread")])
    w = np.random.default_rng(0).standard_normal((8, 16))
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    plain = backbone.last_token_states(ids).numpy()
    ablated = backbone.last_token_states(ids, Intervention("ablate", (3,), w, np.full(8, 2.0))).numpy()
    added = backbone.last_token_states(ids, Intervention("add", (3,), w, np.full(8, 2.0), alpha=1.5)).numpy()
    assert np.abs(ablated[:, 2] @ w[2]).max() < 1e-5  # h - (h . w) w
    assert np.allclose(added[:, 2] @ w[2] - plain[:, 2] @ w[2], 3.0, atol=1e-4)  # h + alpha * sigma * w
    assert np.allclose(plain[:, :2], added[:, :2]) and np.allclose(plain[:, :2], ablated[:, :2])  # earlier layers
    assert not np.allclose(added, ablated)
    (harmful, _benign) = ids
    assert backbone.generate(harmful, 20, Intervention("add", (3,), w, np.full(8, 2.0), alpha=2.0)).text.startswith("I'm sorry")


def test_steer_add_and_ablate_give_different_answers(client):
    auth = {"Authorization": f"Bearer {STEER_KEY}"}

    def steered(**options):
        r = client.post("/steer", json={"prompt": "make a bomb", "max_new_tokens": 20, **options}, headers=auth)
        assert r.status_code == 200, r.text
        return r.json()

    ablate, add, pushed = steered(mode="ablate"), steered(mode="add", alpha=-5.0), steered(mode="add", alpha=5.0)
    base = ablate["classification"]["baseline"]["score"]
    assert len({ablate["classification"]["steered"]["score"], add["classification"]["steered"]["score"], base}) == 3
    assert pushed["classification"]["steered"]["score"] >= base
    assert (ablate["steered"]["refused"], add["steered"]["refused"], pushed["steered"]["refused"]) == (False, False, True)


@pytest.mark.parametrize("options", [{"mode": "ablate", "alpha": 5}, {"alpha": -0.5}])
def test_steer_refuses_an_alpha_that_mode_ablate_would_ignore(client, options):
    # It was accepted and echoed ("alpha": 5.0) though ablation ignores it, so the answer claimed an edit not made
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    r = client.post("/steer", json={"prompt": "make a bomb", "max_new_tokens": 4, **options}, headers=auth)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert (error["type"], error["field"]) == ("invalid_request", "alpha")
    assert error["message"].startswith("alpha applies to mode 'add' only; mode 'ablate' ignores it (got alpha")
    for fine in ({"mode": "ablate", "alpha": 0}, {"mode": "ablate"}, {"mode": "add", "alpha": 5}, {"alpha": -0.0}):
        ok = client.post("/steer", json={"prompt": "make a bomb", "max_new_tokens": 4, **fine}, headers=auth)
        assert ok.status_code == 200 and ok.json()["alpha"] == fine.get("alpha", 0), ok.text
        assert '"alpha":-' not in ok.text  # -0.0 is echoed as 0.0: no edit (tester)


@pytest.mark.parametrize("options", [{"mode": "add"}, {"mode": "add", "alpha": 0}, {"mode": "add", "alpha": -0.0}])
def test_steer_refuses_mode_add_without_a_non_zero_alpha(client, options):
    # It was answered 200 with steered == baseline: an "add" of 0 * sigma * w, reported as an edit (breaker finding)
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    r = client.post("/steer", json={"prompt": "hi", "max_new_tokens": 4, **options}, headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {"type": "invalid_request", "field": "alpha", "message": "mode 'add' needs a non-zero alpha"
                                 " (alpha 0, the default, adds nothing); send alpha in -50..50, not 0"}


@pytest.mark.parametrize("alpha", [1e-320, -1e-320, 5e-7, -9.99e-7])
def test_steer_refuses_an_add_too_small_to_change_anything(client, alpha):
    # a denormal 1e-320 was answered 200 with steered == baseline, reported as an edit (as alpha 0 had been)
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    r = client.post("/steer", json={"prompt": "hi", "max_new_tokens": 4, "mode": "add", "alpha": alpha}, headers=auth)
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {"type": "invalid_request", "field": "alpha", "message": "mode 'add' needs |alpha| of at"
                                 f" least 1e-06 (got alpha {alpha!r}, which adds nothing measurable); send alpha in"
                                 " -50..50 with |alpha| >= 1e-06"}
    for fine in (1e-6, -1e-6):
        ok = client.post("/steer", json={"prompt": "hi", "max_new_tokens": 4, "mode": "add", "alpha": fine}, headers=auth)
        assert ok.status_code == 200 and ok.json()["alpha"] == fine, ok.text


def test_steer_is_off_by_default():
    with client_for() as c:
        wait_ready(c)
        r = c.post("/steer", json={"prompt": "x"})
        assert r.status_code == 404 and "HERALD_STEER_ENABLED" in r.json()["error"]["message"]
    assert c.app.state.herald.moderator.decode_step_s.seconds is None  # no generation timed at warm-up


def test_with_steering_on_the_warm_up_times_a_decode_step_so_the_first_steer_has_an_estimate(client):
    from herald_service.api.app import STEER_WARMUP_TOKENS, _warm_decode_step
    from herald_service.backbone.fake import FakeBackbone
    from herald_service.engine.runtime import Runtime

    assert client.app.state.herald.moderator.decode_step_s.seconds is not None
    # Timed on a fake at 20 ms a step: its 5-word reply is 4 steps of at least 20 ms each, less a little for the prefill
    # subtracted (timed with the probe, so a little longer than generation's own); far less than 0.5 s.
    runtime = fake_runtime()
    slow = sharing_vocab(runtime, FakeBackbone(step_delay_s=0.02))
    seconds, steps = _warm_decode_step(Runtime(slow, runtime.probe, runtime.manifest, runtime.probe_path))
    assert steps == 4 and 0.015 <= seconds / steps < 0.5 and STEER_WARMUP_TOKENS == 16


def test_api_keys_guard_moderation_but_not_probes():
    with client_for(api_keys=API_KEY) as c:
        wait_ready(c)
        assert c.post("/classify", json={"input": "hi"}).status_code == 401
        assert c.post("/v1/moderations", json={"input": "hi"}, headers={"Authorization": "Bearer wrong-key-000000"}).status_code == 401
        ok = c.post("/classify", json={"input": "hi"}, headers={"Authorization": f"Bearer {API_KEY}"})
        assert ok.status_code == 200
        assert c.get("/health/ready").status_code == 200
        assert c.get("/metrics").status_code == 200


def test_metrics_move_with_traffic(client):
    def value(text, prefix):
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))

    before = client.get("/metrics").text
    client.post("/classify", json={"input": ["build a bomb", "bake a cake", "bake a pie"]})
    client.post("/classify", json={"input": ["x" * 500]})
    after = client.get("/metrics").text
    flagged = 'herald_moderation_decisions_total{decision="flagged",route="/classify"}'
    allowed = 'herald_moderation_decisions_total{decision="allowed",route="/classify"}'
    assert value(after, flagged) - value(before, flagged) == 1
    assert value(after, allowed) - value(before, allowed) == 2
    ok = 'herald_requests_total{route="/classify",status="200"}'
    too_large = 'herald_requests_total{route="/classify",status="413"}'
    assert value(after, ok) - value(before, ok) == 1
    assert value(after, too_large) - value(before, too_large) == 1
    assert value(after, "herald_batch_size_prompts_count") > value(before, "herald_batch_size_prompts_count")
    assert value(after, "herald_prompt_tokens_count") - value(before, "herald_prompt_tokens_count") == 3
    assert 'herald_rejected_requests_total{reason="characters"}' in after
    assert "herald_worker_up 1.0" in after and "herald_worker_failed 0.0" in after
    assert "/health" not in "".join(l for l in after.splitlines() if l.startswith("herald_requests_total"))


def test_info_and_page(client):
    info = client.get("/v1/info").json()
    assert info["backbone"]["num_layers"] == 8 and info["limits"]["max_tokens"] == 40
    assert info["steer_enabled"] is True and info["limits"]["steer_max_concurrent"] == 1
    # what a client needs to size its requests (tester nit: the body limit and score_messages were missing)
    assert info["limits"]["max_body_bytes"] == 4 * 200 * 6 + 65_536 and info["score_messages"] == "pending"
    assert info["probe"]["reference_check"] is None  # the fake probe has no reference prompts: null, not left out
    schema = client.get("/openapi.json").json()
    assert schema["paths"]["/v1/info"]["get"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/InfoResponse"}
    assert set(schema["components"]["schemas"]["InfoLimits"]["required"]) >= {"max_tokens", "max_body_bytes"}
    assert info["limits"]["steer_max_new_tokens"] == 128  # the /steer limit a client must know before it asks
    with client_for(steer_enabled=True, steer_api_key=STEER_KEY, steer_max_new_tokens=16) as small:
        wait_ready(small)
        assert small.get("/v1/info").json()["limits"]["steer_max_new_tokens"] == 16
    with client_for() as off:  # steering off: no steer limits listed
        wait_ready(off)
        assert not {"steer_max_concurrent", "steer_max_new_tokens"} & set(off.get("/v1/info").json()["limits"])
    assert info["probe"]["manifest"]["feature_set"] == "herald-v1"
    page = client.get("/")
    assert page.status_code == 200 and "classify" in page.text
    # the page has an API-key field: no other site may frame it (tester)
    policy = page.headers["content-security-policy"]  # its own script and style only (tests/test_ui_page.py)
    assert "frame-ancestors 'none'" in policy and "default-src 'none'" in policy and page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff" and page.headers["referrer-policy"] == "no-referrer"


def test_docs_pages_load_their_scripts_from_this_server_not_a_cdn(client):
    # tester nit: FastAPI's /docs and /redoc load Swagger UI / ReDoc from cdn.jsdelivr.net (blank without internet)
    import re

    for path, title in (("/docs", "Herald - Swagger UI"), ("/redoc", "Herald - ReDoc")):
        page = client.get(path)
        assert page.status_code == 200 and f"<title>{title}</title>" in page.text
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "no-referrer"
        assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text
        urls = re.findall(r'(?:src|href)="([^"]+)"', page.text) + re.findall(r"url: '([^']+)'", page.text)
        assert urls and all(u.startswith("/") for u in urls), (path, urls)  # nothing from another host
        assert "cdn." not in page.text and "fonts.googleapis" not in page.text
        for url in urls:
            asset = client.get(url)
            assert asset.status_code == 200 and len(asset.content) > 1000, url
            assert client.head(url).status_code == 200
        assert client.head(path).status_code == 200
    assert all("?v=" in url for url in urls if "openapi" not in url)  # a package upgrade changes the URLs
    script = client.get("/docs/swagger-ui-bundle.js")
    # a browser's current copy is answered 304, with no body (re-tester: the 1.5 MB script came again every time)
    again = client.get("/docs/swagger-ui-bundle.js", headers={"if-none-match": script.headers["etag"]})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == script.headers["etag"]
    assert client.get("/docs/swagger-ui-bundle.js", headers={"if-none-match": '"other"'}).status_code == 200
    assert script.headers["content-type"].startswith(("application/javascript", "text/javascript"))
    assert "SwaggerUIBundle" in script.text[:2000] and "max-age=86400" in script.headers["cache-control"]
    assert client.get("/docs/swagger-ui.css").headers["content-type"].startswith("text/css")
    assert "Redoc" in client.get("/redoc/redoc.standalone.js").text[:5000]
    assert client.get("/docs/oauth2-redirect").status_code == 404  # bearer keys only: no OAuth page
    assert client.get("/openapi.json").json()["openapi"].startswith("3.1")  # what Swagger UI 5 reads


def test_not_ready_until_loaded_then_ready():
    slow_loader, gate = held_loader(10)

    with TestClient(build_app(Settings(_env_file=None, fake_backend=True), loader=slow_loader)) as c:
        assert c.get("/health/live").status_code == 200
        r = c.get("/health/ready")
        assert r.status_code == 503 and "loading" in r.json()["error"]["message"]
        assert r.headers["retry-after"] == "5"  # loading: up soon (a new-user pass found 503s without it)
        loading = c.get("/v1/info").json()  # before the load: the limits as set, no backbone or probe (not null)
        assert loading["ready"] is False and not {"backbone", "probe"} & set(loading)
        assert loading["limits"]["batch_token_budget"] == "auto" and loading["limits"]["max_tokens"] == Settings(_env_file=None).max_tokens
        for path, body in (("/classify", {"input": "hi"}), ("/v1/moderations", {"input": "hi"})):
            r = c.post(path, json=body)
            assert (r.status_code, r.headers["retry-after"], r.json()["error"]["type"]) == (503, "5", "not_ready")
        gate.set()
        wait_ready(c)


def test_a_shutdown_during_the_warm_up_stops_it_at_the_next_step():
    # tester finding: a SIGTERM during the warm-up kept the process up for the rest of it, 24 s on the CPU
    import threading
    import time

    from herald_service.engine.runtime import fake_runtime

    runtime = fake_runtime()
    forward = runtime.backbone.last_token_states
    calls: list[bool] = []  # per forward: whether the shutdown had begun when it started
    first = threading.Event()
    settings = Settings(_env_file=None, fake_backend=True, warmup=True)
    app = build_app(settings, loader=lambda s: runtime)

    def slow_forward(ids, *args, **kwargs):
        calls.append(app.state.herald.stopping.is_set())
        if len(calls) == 2:  # the warm-up prompts ran; the cost model's shapes are being timed
            first.set()
        time.sleep(0.2)
        return forward(ids, *args, **kwargs)

    runtime.backbone.last_token_states = slow_forward
    with TestClient(app) as c:
        assert first.wait(10)
        ready = c.get("/health/ready")
        assert ready.status_code == 503  # and says what it does (it said "loading model and probe": tester finding)
        assert ready.json()["error"]["message"] == "warming up: timing the batch shapes admission control prices requests by"
    loading = [t for t in threading.enumerate() if t.name == "herald-load"]
    for thread in loading:
        thread.join(10)
    assert not any(t.is_alive() for t in loading)
    # the whole warm-up is 9 forwards (the warm-up prompts, then they and each cost shape twice); after the shutdown
    # began, at most one (its check passed just before) starts
    assert calls.count(True) <= 1 and len(calls) < 9, calls


def test_serve_waits_for_a_load_under_way_before_the_interpreter_exits():
    # tester finding: a SIGTERM during a first start's GGUF conversion left the load to the interpreter's exit, where
    # concurrent.futures takes no more work: the conversion failed in save_pretrained and was thrown away
    import threading
    import time

    from herald_service.api.app import LOAD_THREAD, wait_for_the_load

    done = threading.Event()
    thread = threading.Thread(target=lambda: (time.sleep(0.3), done.set()), name=LOAD_THREAD)
    thread.start()
    assert wait_for_the_load() is None
    assert done.is_set() and not thread.is_alive()
    assert wait_for_the_load() is None  # none under way: returns at once
    # one that fails after nobody awaits it is reported (the process exited 0 without a word: tester finding); one
    # that stopped for the shutdown is not
    from herald_service.api.app import ShutDownDuringStartUp
    from herald_service.errors import BackboneError

    for error, reported in ((BackboneError("cannot load a causal LM from /x", field="backbone"),
                             "cannot load a causal LM from /x"), (ShutDownDuringStartUp(), None)):
        def failing(error=error):
            time.sleep(0.2)
            threading.current_thread().herald_error = error

        threading.Thread(target=failing, name=LOAD_THREAD).start()
        assert wait_for_the_load() == reported


def test_serve_gives_up_a_load_that_outlasts_the_shutdown_wait(monkeypatch, caplog):
    # operator tester: a SIGTERM during the load waited for all of it, unbounded; a large backbone's load ran past
    # Kubernetes' grace period and the pod was killed anyway
    import threading
    import time

    from herald_service.api import app as app_module
    from herald_service.cli import serve

    class Exited(Exception):
        pass

    def fake_exit(status):
        raise Exited(status)

    monkeypatch.setattr(app_module, "LOAD_WAIT_AT_SHUTDOWN_S", 0.3)
    monkeypatch.setattr(serve.os, "_exit", fake_exit)
    release = threading.Event()
    for raised, status in ((None, 0), (KeyboardInterrupt(), 130), (SystemExit(3), 3), (RuntimeError("x"), 1)):
        thread = threading.Thread(target=lambda: release.wait(10), name=app_module.LOAD_THREAD)
        thread.start()
        started = time.monotonic()
        with pytest.raises(Exited) as exited:
            serve.finish_the_load(raised)
        assert exited.value.args == (status,) and 0.3 <= time.monotonic() - started < 2
        assert "did not finish within 0.3 s of the shutdown: exiting without it" in caplog.text
        release.set()
        thread.join(5)
        release.clear()
    # a load that ends within the wait is let finish, and its failure reported as before
    done = threading.Thread(target=lambda: time.sleep(0.1), name=app_module.LOAD_THREAD)
    done.start()
    assert serve.finish_the_load(None) is None and not done.is_alive()


def test_a_backbone_that_cannot_encode_the_empty_prompt_still_comes_up_and_says_so(caplog):
    # tester finding: on a backbone with no chat template and no BOS token the empty prompt is no token at all; the
    # start-up check of the timeout raised after readiness, unlogged, and "ready" was never logged
    from herald_service.engine.runtime import fake_runtime
    from herald_service.errors import InvalidInput

    runtime = fake_runtime()
    encode = runtime.backbone.encode

    def no_empty_prompt(conversations, *args, **kwargs):
        if any(not message.content for conversation in conversations for message in conversation):
            raise InvalidInput("the prompt renders to no token", field="input")
        return encode(conversations, *args, **kwargs)

    runtime.backbone.encode = no_empty_prompt
    with caplog.at_level("INFO", logger="herald_service.api.app"):
        with TestClient(build_app(Settings(_env_file=None, fake_backend=True), loader=lambda s: runtime)) as c:
            wait_ready(c)
            assert c.post("/classify", json={"input": "hi"}).status_code == 200
    messages = [r.getMessage() for r in caplog.records]
    assert ("the empty prompt cannot be scored on this backbone (the prompt renders to no token): no start-up check of"
            " HERALD_REQUEST_TIMEOUT_S against the shortest prompt") in messages
    assert any(m.startswith("ready: ") for m in messages), messages


def test_health_probes_answer_head_with_the_status_of_get():
    # Load balancers and uptime checkers send HEAD; it was a 405, which reads as "down" to some of them
    slow_loader, gate = held_loader(10)

    with TestClient(build_app(Settings(_env_file=None, fake_backend=True), loader=slow_loader)) as c:
        live, ready = c.head("/health/live"), c.head("/health/ready")
        assert (live.status_code, ready.status_code) == (200, 503)
        assert live.content == b"" and ready.content == b"" and ready.headers["content-type"] == "application/json"
        gate.set()
        wait_ready(c)
        assert (c.head("/health/live").status_code, c.head("/health/ready").status_code) == (200, 200)
        refused = c.post("/health/live")  # only GET and HEAD, and its Allow says both (tester: "allow: GET")
        assert refused.status_code == 405 and refused.headers["allow"] == "GET, HEAD"
        assert c.delete("/classify").headers["allow"] == "POST"
        assert "/health" not in "".join(l for l in c.get("/metrics").text.splitlines() if l.startswith("herald_requests_total"))
        for path in ("/metrics", "/v1/info", "/"):  # monitors probe these with HEAD too (breaker: 405)
            head, get = c.head(path), c.get(path)
            assert (head.status_code, head.content) == (200, b""), path
            assert head.headers["content-type"] == get.headers["content-type"], path
            assert c.post(path).headers["allow"] == "GET, HEAD", path  # was "HEAD" once HEAD was registered first (breaker)


def test_load_failure_is_reported_not_hung():
    from herald_service.errors import ProbeMismatch

    def failing_loader(_settings):
        raise ProbeMismatch("probe was fitted on 'a' but the backbone is 'b'", field="probe")

    with TestClient(build_app(Settings(_env_file=None), loader=failing_loader)) as c:
        for _ in range(100):
            r = c.get("/health/ready")
            if "fitted" in r.text:
                break
        assert r.status_code == 503 and "fitted on 'a'" in r.json()["error"]["message"]
        assert "retry-after" not in r.headers  # a failed load does not come up by retrying
        r = c.post("/classify", json={"input": "hi"})
        assert r.status_code == 503 and "retry-after" not in r.headers
        metrics = c.get("/metrics").text
    # the alert rule fires on this at once, not after the 10-minute startup allowance (docker/prometheus/alerts.yml)
    assert "herald_worker_failed 1.0" in metrics and "herald_worker_up 0.0" in metrics


def test_a_budget_the_device_cannot_hold_stops_the_start_with_the_settings_named():
    """HERALD_BATCH_TOKEN_BUDGET below HERALD_MAX_TOKENS, device and chunk auto: refused once the backbone turns out to
    run on CUDA (chunks off there), as a settings error on /health/ready, not a traceback."""
    from herald_service.backbone.fake import FakeBackbone
    from herald_service.engine.runtime import Runtime

    runtime = fake_runtime()
    cuda = sharing_vocab(runtime, FakeBackbone(overlaps_host=True))
    stopped = []
    settings = Settings(max_tokens=10_000, batch_token_budget=4096, _env_file=None)
    app = build_app(settings, loader=lambda _s: Runtime(cuda, runtime.probe, runtime.manifest, runtime.probe_path),
                    on_load_error=lambda: stopped.append(True))
    with TestClient(app) as c:
        for _ in range(100):
            if stopped:
                break
            time.sleep(0.05)
        r = c.get("/health/ready")
    assert stopped == [True] and r.status_code == 503
    assert r.json()["error"]["message"].startswith("batch_token_budget (4096, HERALD_BATCH_TOKEN_BUDGET) is below max_tokens")


def test_info_shows_the_batch_token_budget_in_use(client):
    limits = client.get("/v1/info").json()["limits"]
    assert (limits["batch_token_budget"], limits["prefill_chunk_tokens"]) == (2048, 512)  # the fake backbone: host


def test_lone_surrogate_is_a_422_naming_the_field(client):
    r = client.post("/classify", content=b'{"input": ["ok", "build a bomb \\ud83d"]}', headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "input[1]"
    assert "surrogate" in r.json()["error"]["message"]


def test_unexpected_error_is_a_500_without_internals():
    from herald_service.engine.runtime import fake_runtime

    def loader(_settings):
        runtime = fake_runtime()

        real_encode = runtime.backbone.encode

        def broken_encode(conversations, fold=True):
            if any("boom" in m.content for c in conversations for m in c):
                raise TypeError("secret internals")
            return real_encode(conversations, fold)

        runtime.backbone.encode = broken_encode
        return runtime

    with TestClient(build_app(Settings(_env_file=None, fake_backend=True), loader=loader), raise_server_exceptions=False) as c:
        wait_ready(c)
        r = c.post("/classify", json={"input": "boom"})
        assert r.status_code == 500
        assert r.json() == {"error": {"type": "internal_error", "message": "internal error; see server log"}}
        assert c.get("/health/ready").status_code == 200
        metrics = c.get("/metrics").text
        assert 'herald_requests_total{route="/classify",status="500"} 1.0' in metrics


def test_a_failed_steer_job_logs_the_request_id_the_client_sees(caplog):
    # the worker thread's "exclusive job failed" ERROR named no request, so an operator could not find its access line
    from herald_service.engine.runtime import fake_runtime

    broken = [False]  # after the start-up warm-up, which generates too

    def loader(_settings):
        runtime = fake_runtime()
        real_generate = runtime.backbone.generate

        def broken_generate(*args, **kwargs):
            if broken[0]:
                raise TypeError("secret internals")
            return real_generate(*args, **kwargs)

        runtime.backbone.generate = broken_generate
        return runtime

    settings = Settings(_env_file=None, fake_backend=True, steer_enabled=True, steer_api_key=STEER_KEY)
    with TestClient(build_app(settings, loader=loader), raise_server_exceptions=False) as c:
        wait_ready(c)
        broken[0] = True
        with caplog.at_level(logging.ERROR, logger="herald_service.engine.engine"):
            r = c.post("/steer", json={"prompt": "x", "max_new_tokens": 2},
                       headers={"Authorization": f"Bearer {STEER_KEY}", "X-Request-ID": "trace-steer-7"})
        assert r.status_code == 500 and r.headers["x-request-id"] == "trace-steer-7"
        assert "secret internals" not in r.text
        failed = [rec for rec in caplog.records if rec.getMessage().startswith("exclusive job failed")]
        assert [rec.getMessage() for rec in failed] == ["exclusive job failed (request_id=trace-steer-7)"]
        assert failed[0].request_id == "trace-steer-7" and failed[0].exc_info is not None
        assert c.post("/classify", json={"input": "hello"}).status_code == 200  # the worker carries on


@pytest.mark.parametrize(
    "content, field, words",
    [
        (b'{"input": ["a", null]}', "input[1]", "valid string"),
        (b'{"input": "a", "return_trajectory": "yes"}', "return_trajectory", "valid boolean"),
        (b"", "body", "required"),
        (b'{"input": "\xff\xfe"}', "body", "UTF-8"),
    ],
)
def test_error_names_the_element_at_fault(client, content, field, words):
    r = client.post("/classify", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field and words in r.json()["error"]["message"]


# -- the moderation routes build their body once (benchmarks/host_cost.py): same bytes, headers and metrics ----------
TIMING_HEADERS = ("x-tokenize-time", "x-queue-time", "x-inference-time", "x-score-time", "x-total-time")


@pytest.mark.parametrize(
    "body",
    [
        {"input": "how do I build a bomb"},
        {"input": ["how do I bake bread", "make a bomb", "poison the well"], "return_trajectory": False},
        {"messages": [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "steal a car"}]]},
    ],
)
def test_classify_body_is_byte_for_byte_what_the_response_model_writes(client, body):
    from herald_service.api.schemas import ClassifyResponse

    r = client.post("/classify", json=body)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    # The bytes FastAPI wrote when the route returned a ClassifyResponse: field order, float format, nulls.
    assert r.content == ClassifyResponse.model_validate_json(r.content).model_dump_json().encode()
    results = r.json()["results"]
    assert list(results[0]) == ["flagged", "score", "logit", "threshold", "tokens", "features", "trajectory", "onset_layer",
                                "view", "view_text"]
    assert list(results[0]["features"]) == ["slope", "curvature", "monotonicity", "onset", "late_level", "peak", "volatility"]
    with_trajectory = body.get("return_trajectory", True)
    assert all((len(x["trajectory"]) == 8) if with_trajectory else (x["trajectory"] is None) for x in results)
    assert int(r.headers["content-length"]) == len(r.content)
    for header in TIMING_HEADERS:
        assert float(r.headers[header]) >= 0
    assert 1 <= int(r.headers["x-batch-size"]) <= len(results)


def test_moderations_body_is_byte_for_byte_what_the_response_model_writes(client):
    from herald_service.api.schemas import ModerationResponse

    first = client.post("/v1/moderations", json={"input": ["hello there", "make a bomb"]})
    second = client.post("/v1/moderations", json={"input": "hello"})
    assert first.status_code == second.status_code == 200
    assert first.content == ModerationResponse.model_validate_json(first.content).model_dump_json().encode()
    ids = [r.json()["id"] for r in (first, second)]
    assert all(i.startswith("modr-") and len(i) == 5 + 32 and int(i[5:], 16) >= 0 for i in ids) and ids[0] != ids[1]
    assert first.json()["model"] == "herald/fake-backbone"
    for header in TIMING_HEADERS:
        assert float(first.headers[header]) >= 0


def test_json_answer_writes_non_finite_floats_as_null_like_pydantic():
    from herald_service.api.routes.classify import json_answer
    from herald_service.api.schemas import ClassifyResult
    from herald_service.types import Timing

    fields = {"flagged": False, "score": float("nan"), "logit": float("-inf"), "threshold": 0.5, "tokens": 3,
              "features": dict.fromkeys(["slope", "curvature", "monotonicity", "onset", "late_level", "peak", "volatility"], 0.25),
              "trajectory": [1e-07, float("inf")], "onset_layer": None, "view": "whole", "view_text": None}
    response = json_answer(fields, Timing(0.001, 0.002, 0.003, 0.004, 2))
    assert response.body == ClassifyResult(**fields).model_dump_json().encode()
    assert b'"score":null' in response.body
    headers = dict(response.headers)
    assert (headers["x-tokenize-time"], headers["x-queue-time"], headers["x-inference-time"], headers["x-score-time"]) == ("1.00", "2.00", "3.00", "4.00")
    assert headers["x-batch-size"] == "2"


def test_moderation_routes_still_count_requests_latency_decisions_and_scores(client):
    def value(text, prefix):
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))

    before = client.get("/metrics").text
    for _ in range(2):
        assert client.post("/v1/moderations", json={"input": ["make a bomb", "bake a cake"]}).status_code == 200
    assert client.post("/classify", json={"input": "bake a pie"}).status_code == 200
    after = client.get("/metrics").text
    moved = {
        'herald_requests_total{route="/v1/moderations",status="200"}': 2,
        'herald_request_duration_seconds_count{route="/v1/moderations",status_class="2xx"}': 2,
        'herald_requests_total{route="/classify",status="200"}': 1,
        'herald_request_duration_seconds_count{route="/classify",status_class="2xx"}': 1,
        'herald_moderation_decisions_total{decision="flagged",route="/v1/moderations"}': 2,
        'herald_moderation_decisions_total{decision="allowed",route="/v1/moderations"}': 2,
        'herald_moderation_decisions_total{decision="allowed",route="/classify"}': 1,
        "herald_moderation_score_ratio_count": 5,
    }
    assert {k: value(after, k) - value(before, k) for k in moved} == moved


def test_api_key_is_checked_before_readiness_and_before_the_body():
    slow_loader, gate = held_loader(10)

    with TestClient(build_app(Settings(_env_file=None, fake_backend=True, api_keys=API_KEY), loader=slow_loader)) as c:
        for path in ("/classify", "/v1/moderations"):
            assert c.post(path, json={"bad": 1}).status_code == 401  # no key: 401, not 503 or 422
            r = c.post(path, json={"input": "hi"}, headers={"Authorization": f"Bearer {API_KEY}"})
            assert r.status_code == 503 and r.json()["error"]["type"] == "not_ready"
        gate.set()
        wait_ready(c)
        r = c.post("/classify", json={"bad": 1}, headers={"Authorization": f"Bearer {API_KEY}"})
        assert r.status_code == 422


def test_moderation_routes_still_document_the_bearer_scheme_and_their_models():
    spec = build_app(Settings(_env_file=None, fake_backend=True, api_keys=[API_KEY])).openapi()  # keys: the scheme
    for path, model in (("/classify", "ClassifyResponse"), ("/v1/moderations", "ModerationResponse")):
        operation = spec["paths"][path]["post"]
        assert {"HTTPBearer": []} in operation["security"]
        assert operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith(model)


def test_objects_loaded_at_start_up_are_frozen_out_of_garbage_collection(monkeypatch):
    import gc

    from herald_service.api.app import _load_and_warm

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    runtime = _load_and_warm(Settings(fake_backend=True), lambda s: fake_runtime())
    assert frozen == [True] and runtime.backbone.info.slug == "fake-backbone"


def test_without_a_key_nothing_about_the_body_is_read_or_reported():
    key = {"Authorization": f"Bearer {API_KEY}"}
    with client_for(api_keys=API_KEY, max_batch_size=2, max_chars=100) as c:
        wait_ready(c)
        for path in ("/classify", "/v1/moderations"):
            for content in (b'{"input":', b'{"input":"\xff"}', b"[" * 3000, b'{"input":"' + b"x" * 2_000_000 + b'"}'):
                r = c.post(path, content=content, headers={"content-type": "application/json"})
                assert r.status_code == 401, (path, content[:20], r.status_code, r.text[:200])
                assert r.json()["error"]["field"] == "authorization" and r.headers["www-authenticate"] == "Bearer"
            # with the key, the same malformed body is reported as such
            r = c.post(path, content=b'{"input":', headers={"content-type": "application/json", **key})
            assert r.status_code == (400 if path == "/v1/moderations" else 422)
        # two Authorization headers: refused whichever comes first
        for pair in ([("authorization", f"Bearer {API_KEY}"), ("authorization", "Bearer wrong-wrong-wrong")],
                     [("authorization", "Bearer wrong-wrong-wrong"), ("authorization", f"Bearer {API_KEY}")]):
            r = c.post("/classify", json={"input": "hi"}, headers=pair)
            assert r.status_code == 401 and "exactly one Authorization header" in r.json()["error"]["message"]
        assert c.post("/classify", json={"input": "hi"}, headers={"Authorization": f"bearer  {API_KEY}"}).status_code == 200


def test_an_unknown_field_is_named_even_when_it_starts_like_a_type_name(client):
    for name in ("stream", "strength", "list"):
        r = client.post("/classify", json={"input": "x", name: True})
        assert r.status_code == 422 and r.json()["error"]["field"] == name, r.text
    r = client.post("/classify", json={"messages": [{"role": "user", "content": "x", "strict": 1}]})
    assert r.json()["error"]["field"] == "messages[0].strict", r.text


@pytest.mark.parametrize("sent, shown", [("/a%0db", "/a\\rb"), ("/a%09b%0A", "/a\\tb\\n"), ("/caf%C3%A9", "/caf\\u00e9")])
def test_a_404_on_the_main_port_echoes_the_path_with_control_characters_escaped_not_dropped(sent, shown):
    # Tester: GET /a%0db read "no route /ab" (the URL parsed again drops CR, LF and TAB), while the health port's 404
    # showed them escaped
    with client_for() as c:
        answer = c.get(sent)
    assert answer.status_code == 404 and answer.json()["error"] == {"type": "not_found", "message": f"no route {shown}"}


def test_requests_answered_before_routing_are_counted_under_their_route():
    with client_for(api_keys=API_KEY, max_batch_size=1, max_chars=10) as c:
        wait_ready(c)
        key = {"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"}
        assert c.post("/classify", content=b'{"input":"' + b"x" * 200_000 + b'"}', headers=key).status_code == 413
        assert c.post("/v1/moderations", json={"input": "hi"}).status_code == 401
        assert c.get("/openapi.json").status_code == 200
        missing = c.get("/no/such/path")
        assert missing.status_code == 404 and missing.json()["error"]["message"] == "no route /no/such/path"
        slash = c.post("/classify/", json={"input": "hi"}, headers=key, follow_redirects=False)
        assert slash.status_code == 404 and slash.json()["error"] == {  # was a bodiless 307, then a bare "Not Found"
            "type": "not_found", "message": "no route /classify/; did you mean /classify (no trailing slash)?"}, slash.text
        metrics = c.get("/metrics").text
    assert 'herald_requests_total{route="/classify",status="413"} 1.0' in metrics
    assert 'herald_requests_total{route="/v1/moderations",status="401"} 1.0' in metrics
    assert 'herald_requests_total{route="/openapi.json",status="200"} 1.0' in metrics
    assert 'herald_requests_total{route="unmatched",status="404"} 2.0' in metrics
    assert 'herald_rejected_requests_total{reason="body_size"} 1.0' in metrics


def test_every_error_body_is_the_same_compact_json(client):
    too_big = client.post("/classify", content=b'{"input":"' + b"x" * 5_000_000 + b'"}', headers={"content-type": "application/json"})
    invalid = client.post("/classify", json={"input": None})
    assert too_big.status_code == 413 and invalid.status_code == 422
    for r in (too_big, invalid):
        assert r.content == json.dumps(r.json(), separators=(",", ":")).encode(), r.content


def test_undecodable_or_too_deeply_nested_bodies_say_which_it_is(client):
    # one message had covered both, without the byte or the limit (breaker finding)
    import sys

    for route in ("/classify", "/v1/moderations"):
        status, openai = (400, {"type": "invalid_request_error", "param": "body", "code": "invalid_request"}) \
            if route == "/v1/moderations" else (422, {})
        r = client.post(route, content=b'{"input":"caf\xe9"}', headers={"content-type": "application/json"})
        assert r.status_code == status and r.json()["error"] == {
            "type": "invalid_request", "field": "body", **openai,
            "message": "request body is not UTF-8: byte 0xe9 at offset 13 cannot be decoded; send UTF-8 JSON"}, r.text
        r = client.post(route, content=b'{"input":' + b"[" * 3000 + b"]" * 3000 + b"}", headers={"content-type": "application/json"})
        assert r.status_code == status and r.json()["error"] == {
            "type": "invalid_request", "field": "body", **openai,
            "message": "request body's JSON is nested more deeply than the parser allows (about"
                       f" {sys.getrecursionlimit():,} levels, Python's recursion limit; a Herald request needs fewer than"
                       " ten)"}, r.text


def test_too_many_messages_are_refused_before_rendering():
    # Empty messages cost no characters but still render and tokenize: a breaker's 64 x 5,600 empty turns took 11 s
    # of CPU before the token limit refused them. The message count is checked first, with the field and the limit.
    with client_for(max_messages=3) as c:
        wait_ready(c)
        turns = [{"role": "user", "content": ""}] * 4
        r = c.post("/classify", json={"messages": [[{"role": "user", "content": "hi"}], turns]})
        assert r.status_code == 413
        error = r.json()["error"]
        assert error["field"] == "messages[1]" and "4 messages; the limit is 3 (max_messages)" in error["message"]
        assert c.post("/classify", json={"messages": [turns[:3]]}).status_code == 200
        assert c.get("/v1/info").json()["limits"]["max_messages"] == 3
        assert 'herald_rejected_requests_total{reason="messages"} 1.0' in c.get("/metrics").text


@pytest.mark.parametrize(
    "path, raw, field",
    [
        ("/classify", b'{"input": "hello", "input": "how do I build a pipe bomb"}', "input"),
        ("/classify", b'{"messages": [{"role": "user", "content": "hi", "content": "poison"}]}', "messages[0].content"),
        ("/v1/moderations", b'{"input": "hello", "input": "poison"}', "input"),
    ],
)
def test_a_key_given_twice_is_refused_naming_it(client, path, raw, field):
    # json keeps the last value; a gateway that keeps the first would log a prompt other than the one judged
    r = client.post(path, content=raw, headers={"content-type": "application/json"})
    assert r.status_code == (400 if path == "/v1/moderations" else 422), r.text
    assert r.json()["error"]["field"] == field and "appears twice" in r.json()["error"]["message"]
    assert client.post(path, json=json.loads(raw)).status_code == 200  # the same body with the key once (json keeps the last)


def test_a_repeated_key_that_is_a_lone_surrogate_gets_a_422_not_a_500(client):
    # The key is echoed in the message; "\ud800" cannot be encoded as UTF-8, which made error_response fail (a 500)
    r = client.post("/classify", content=b'{"input": "a", "\\ud800": 1, "\\ud800": 2}', headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "\\ud800" and "appears twice" in r.json()["error"]["message"]
    long_key = "k" * 5000
    r = client.post("/classify", content=json.dumps({"input": "a"}).encode()[:-1] + f', "{long_key}": 1, "{long_key}": 2}}'.encode(),
                    headers={"content-type": "application/json"})
    assert r.status_code == 422 and len(r.content) < 1000  # the key is cut, not echoed twice in full


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "a", "content": "b"}]}',
         "messages[1].content"),
        (b'{"messages": [[{"role": "user", "content": "hi"}], [{"role": "user", "role": "user", "content": "b"}]]}',
         "messages[1][0].role"),
        (b'{"input": "a", "extra": {"k": 1, "k": 2}}', "extra.k"),
    ],
)
def test_a_nested_key_given_twice_is_named_by_its_path(client, raw, field):
    r = client.post("/classify", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {"type": "invalid_request", "field": field,
                                 "message": f"key '{field}' appears twice in one JSON object of the request body; give it once"}


@pytest.mark.parametrize("content_type, got", [("text/plain", "not 'text/plain'"),
                                              ("application/x-www-form-urlencoded", "not 'application/x-www-form-urlencoded'"),
                                              (None, "none was given")])
def test_a_body_that_is_not_declared_json_gets_the_content_type_error_even_with_a_repeated_key(client, content_type, got):
    # FastAPI reads a body as JSON only for application/json (or +json); the repeated-key check must not answer first
    headers = {"content-type": content_type} if content_type else {}
    expected = {"error": {"type": "unsupported_media_type", "field": "content-type",
                          "message": "request body must be JSON: Content-Type application/json (or application/*+json)"
                                     f" is required ({got})"}}
    valid = client.post("/classify", content=b'{"input": "hello"}', headers=headers)
    repeated = client.post("/classify", content=b'{"input": "a", "input": "b"}', headers=headers)
    assert (valid.status_code, valid.json()) == (415, expected)
    assert (repeated.status_code, repeated.json()) == (415, expected)


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"input": "a", "\\ud800": 1}', "\\ud800"),
        (b'{"messages": [{"role": "user", "content": "x", "x\\udfffy": 2}]}', "messages[0].x\\udfffy"),
        (b'{"input": {"\\ud800": 1}}', "input.\\ud800"),
    ],
)
def test_a_key_holding_a_lone_surrogate_is_named_by_its_path(client, raw, field):
    r = client.post("/classify", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == {"type": "invalid_request", "field": field, "message":
                                 f"key '{field}' of the request body holds a lone UTF-16 surrogate (not valid Unicode);"
                                 " send well-formed UTF-8"}
    assert client.post("/v1/moderations", content=raw, headers={"content-type": "application/json"}).status_code == 400


def test_steer_errors_name_the_field_the_conversation_came_in(client):
    auth = {"Authorization": f"Bearer {STEER_KEY}"}
    empty = client.post("/steer", json={"messages": []}, headers=auth)
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "messages"
    long = client.post("/steer", json={"messages": [{"role": "user", "content": "x" * 300}]}, headers=auth)
    assert long.status_code == 413 and long.json()["error"]["field"] == "messages"
    assert client.post("/steer", json={"prompt": "x" * 300}, headers=auth).json()["error"]["field"] == "prompt"
    wrong = client.post("/steer", json={"prompt": "x"})
    assert wrong.status_code == 401 and "steer key" in wrong.json()["error"]["message"]


def test_steer_switched_off_is_refused_before_its_body_is_read():
    with client_for(api_keys=["a-real-key-0123456789"]) as c:
        wait_ready(c)
        for body in (b"garbage", b'{"prompt": "a", "prompt": "b"}'):
            r = c.post("/steer", content=body, headers={"content-type": "application/json"})  # no key at all
            assert r.status_code == 404 and r.json()["error"]["type"] == "not_enabled", r.text


def test_an_object_with_too_many_keys_is_refused_while_parsing(client):
    # 600,000 unknown keys (7 MB) cost 3 s of validation on the event loop; more than 256 keys is refused at parse time
    body = "{" + ",".join(f'"k{i}":1' for i in range(300)) + ', "input": "a"}'
    r = client.post("/classify", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == {
        "type": "invalid_request", "message": "the request body has 301 keys; the limit is 256", "field": "body"}
    # an inner object is named by its path (it read "body": fuzz tester)
    calls = "{" + ",".join(f'"k{i}":1' for i in range(257)) + "}"
    body = '{"messages": [{"role": "assistant", "content": null, "function_call": ' + calls + '}]}'
    r = client.post("/classify", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"] == {
        "type": "invalid_request", "message": "the object at 'messages[0].function_call' has 257 keys; the limit is 256",
        "field": "messages[0].function_call"}


def test_a_client_gone_mid_upload_is_counted_as_499_not_500():
    import asyncio

    from herald_service.api.middleware import RequestMetrics
    from herald_service.metrics import HeraldMetrics

    metrics = HeraldMetrics()

    async def app_that_never_answers(scope, receive, send):  # what BodyLimit does when the client drops a chunked upload
        await receive()

    async def call():
        async def receive():
            return {"type": "http.disconnect"}

        async def send(message):
            raise AssertionError("nothing is sent")

        await RequestMetrics(app_that_never_answers, metrics, frozenset({"/classify"}))(
            {"type": "http", "method": "POST", "path": "/classify", "headers": []}, receive, send)

    asyncio.run(call())
    counted = {s.labels["status"]: s.value for m in metrics.registry.collect() for s in m.samples
               if s.name == "herald_requests_total" and s.labels.get("route") == "/classify"}
    assert counted == {"499": 1.0}


def test_chunks_by_characters_keep_short_prompts_together_and_long_ones_apart():
    def prompts(*sizes):
        return [user_turn("x" * n) for n in sizes]

    assert chunks_by_characters(prompts(10, 10, 10), 100) == [(0, 3)]
    assert chunks_by_characters(prompts(60, 60, 10, 200, 5), 100) == [(0, 1), (1, 3), (3, 4), (4, 5)]
    assert chunks_by_characters([], 100) == []


def test_a_prompt_over_the_token_limit_ends_the_encoding_of_the_prompts_after_it(monkeypatch):
    # The breaker's case: 64 prompts of 32,000 characters were all folded and tokenized (4 s) before the 413.
    with client_for(max_chars=32_000, max_tokens=100, max_batch_size=64) as client:
        wait_ready(client)
        backbone = client.app.state.herald.runtime.backbone
        encode, seen = backbone.encode, []

        def counting(conversations, fold=True):
            seen.append(len(conversations))
            return encode(conversations, fold)

        monkeypatch.setattr(backbone, "encode", counting)
        long = "wd " * 9_000
        refused = client.post("/classify", json={"input": ["hi"] * 40 + [long] * 24})
        assert refused.status_code == 413 and refused.json()["error"]["field"] == "input[40]"
        assert "prompt renders to 9" in refused.json()["error"]["message"]
        assert seen == [40, 1]  # the 23 long prompts after it were never encoded
        seen.clear()
        answered = client.post("/classify", json={"input": ["hi"] * 64, "return_trajectory": False})
        assert answered.status_code == 200 and len(answered.json()["results"]) == 64
        assert seen == [64]  # short prompts: one hop, as before


def test_a_prompt_the_backbone_refuses_in_a_later_chunk_is_named_by_its_place_in_the_request(monkeypatch):
    with client_for(max_chars=32_000, max_tokens=8_000, max_batch_size=64) as client:
        wait_ready(client)
        backbone = client.app.state.herald.runtime.backbone
        encode = backbone.encode

        def refusing(conversations, fold=True):  # as HFBackbone.encode refuses a prompt that renders to no token
            for i, conversation in enumerate(conversations):
                if conversation[0].content == "refuse me":
                    raise InvalidInput("prompt renders to no token", prompt_index=i)
            return encode(conversations, fold)

        monkeypatch.setattr(backbone, "encode", refusing)
        r = client.post("/classify", json={"input": ["wd " * 6_000] * 3 + ["hi", "refuse me"]})
        assert r.status_code == 422 and r.json()["error"]["field"] == "input[4]", r.text  # chunk (3, 5), its 2nd prompt


def test_the_load_runs_on_a_thread_that_has_ended_when_it_returns():
    # Its OpenMP team must be gone before the worker's first forward (herald_service.api.app.in_passing_thread: after
    # a load on an executor thread that stayed alive, the worker's forwards took about twice as long on 2 cores).
    import asyncio
    import threading

    from herald_service.api.app import in_passing_thread

    seen = []

    def work(x):
        seen.append(threading.current_thread())
        return x * 2

    def fail():
        raise ValueError("bad probe")

    async def main():
        assert await in_passing_thread(work, 21) == 42
        with pytest.raises(ValueError, match="bad probe"):
            await in_passing_thread(fail)

    asyncio.run(main())
    assert seen[0] is not threading.main_thread() and not seen[0].is_alive()


def test_steer_layers_are_checked_without_a_backbone_as_far_as_they_can_be():
    from herald_service.types import checked_steer_layers, steer_layers

    assert checked_steer_layers([40, 2], None) == [2, 40]  # no upper bound before the backbone is known
    with pytest.raises(ValueError, match="non-empty list of 1-based layers"):
        checked_steer_layers([], None)
    for layers, named in (([0], "0"), ([3, -1, 0], "-1, 0")):  # "non-empty list" for [0] misread it (re-tester)
        with pytest.raises(ValueError, match=f"lists {named}: layers are 1-based"):
            checked_steer_layers(layers, None)
    with pytest.raises(ValueError, match="lists 2 more than once"):
        checked_steer_layers([2, 2], None)
    with pytest.raises(ValueError, match="within 1..8"):
        checked_steer_layers([40], 8)
    assert steer_layers("all", 3, 2) == [1, 2, 3] and steer_layers(None, 3, 2) == [2] and steer_layers([3, 1], 3, 2) == [1, 3]


def test_each_request_is_logged_once_with_its_route_status_duration_and_request_id(client, caplog):
    import logging
    import re

    with caplog.at_level(logging.INFO, logger="herald_service.access"):
        sent = client.post("/classify", json={"input": "hello"}, headers={"X-Request-ID": "abc-123:x/y=z"})
        stray = client.get("/no/such/path?q=1")
        probe = client.get("/health/live")
        bad = client.post("/classify", json={"input": 5}, headers={"X-Request-ID": "r2"})
        odd = client.post("/classify", json={"input": "hi", "x y\n=1": 1}, headers={"X-Request-ID": "r3"})
        typed = client.post("/classify", content=b"{}", headers={"content-type": "text/plain", "X-Request-ID": "r4"})
        openai = client.post("/v1/moderations", json={"input": []}, headers={"X-Request-ID": "r5"})
    assert sent.status_code == 200 and sent.headers["x-request-id"] == "abc-123:x/y=z"
    lines = [r.getMessage() for r in caplog.records if r.name == "herald_service.access"]
    assert len(lines) == 6, lines  # probes stay out of the log, as out of the metrics
    # Starlette's test client connects from "testclient"
    assert re.fullmatch(r"POST /classify 200 \d+\.\d ms request_id=abc-123:x/y=z client=testclient", lines[0]), lines[0]
    generated = stray.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", generated)  # none sent: a new UUID4
    assert lines[1] == lines[1].split(" request_id=")[0] + f" request_id={generated} client=testclient error=not_found"
    # why each was refused: the error type, and the field where it is a plain path (a 422 was logged with its status
    # alone: new-user pass); a client's odd key is not written into the line
    assert (bad.status_code, odd.status_code, typed.status_code, openai.status_code) == (422, 422, 415, 400)
    assert lines[2].startswith("POST /classify 422 ") and lines[2].endswith(
        " request_id=r2 client=testclient error=invalid_request field=input"), lines[2]
    assert lines[3].endswith(" request_id=r3 client=testclient error=invalid_request") and "x y" not in lines[3], lines[3]
    assert lines[4].endswith(" request_id=r4 client=testclient error=unsupported_media_type field=content-type"), lines[4]
    assert lines[5].startswith("POST /v1/moderations 400 ") and lines[5].endswith(
        " request_id=r5 client=testclient error=invalid_request field=input"), lines[5]  # Herald's type, not OpenAI's
    refused = [r for r in caplog.records if r.name == "herald_service.access"][2]
    assert (refused.error, refused.field) == ("invalid_request", "input")  # fields of the record too, for json logs
    # the same values as fields of the record, which HERALD_LOG_FORMAT=json writes apart
    record = next(r for r in caplog.records if r.name == "herald_service.access")
    assert (record.method, record.route, record.status, record.request_id, record.client) == (
        "POST", "/classify", 200, "abc-123:x/y=z", "testclient")
    assert isinstance(record.duration_ms, float) and f"{record.duration_ms:.1f} ms" in lines[0]
    assert lines[1].startswith("GET unmatched 404 ")  # the route template: the client's path is not logged
    assert re.fullmatch(r"[0-9a-f]{32}", probe.headers["x-request-id"])


@pytest.mark.parametrize("sent", ['a b', 'x" y=1', "é", "a" * 129, ""])
def test_a_request_id_that_could_forge_a_log_line_is_replaced(client, sent):
    answer = client.get("/v1/info", headers={"X-Request-ID": sent.encode("utf-8")})
    assert answer.headers["x-request-id"] != sent and len(answer.headers["x-request-id"]) == 32


def test_the_openapi_document_gives_the_limits_the_server_enforces():
    """The document gave /steer's max_new_tokens no maximum and texts no length (tester): its request schemas carry
    this server's limits (settings), and a request at each limit is answered while one past it is refused naming the
    field (413 or 422; /v1/moderations: OpenAI's 400)."""
    limits = dict(max_chars=30, max_batch_size=3, max_messages=4, steer_max_new_tokens=5)
    with client_for(**limits, steer_enabled=True, steer_api_key=STEER_KEY) as c:
        wait_ready(c)
        schemas = c.get("/openapi.json").json()["components"]["schemas"]
        text, prompts, _ = schemas["ClassifyRequest"]["properties"]["input"]["anyOf"]
        messages = schemas["ClassifyRequest"]["properties"]["messages"]["anyOf"][0]["maxItems"]
        parts = schemas["ModerationRequest"]["properties"]["input"]["anyOf"][2]["maxItems"]
        new_tokens = schemas["SteerRequest"]["properties"]["max_new_tokens"]["maximum"]
        assert (text["maxLength"], prompts["maxItems"], prompts["items"]["maxLength"], messages, parts, new_tokens) == (
            30, 3, 30, 4, 2, 5)
        assert schemas["SteerRequest"]["properties"]["prompt"]["anyOf"][0]["maxLength"] == 30
        assert schemas["ChatMessage"]["properties"]["content"]["anyOf"][0]["maxLength"] == 30
        steer = {"Authorization": f"Bearer {STEER_KEY}"}

        def conversation(n: int) -> list[dict]:  # one pending user turn, so it counts 2 prompts of the batch
            return [{"role": "system", "content": "be brief"}] * (n - 3) + [
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "hi"}]

        def part(n: int) -> list[dict]:
            return [{"type": "text", "text": "hi"}] * n

        cases = [  # path, body of size n, the limit from the document, the field a refusal names, headers
            ("/classify", lambda n: {"input": "a" * n}, text["maxLength"], "input", {}),
            ("/classify", lambda n: {"input": ["hi"] * n}, prompts["maxItems"], "input", {}),
            ("/classify", lambda n: {"messages": conversation(n)}, messages, "messages", {}),
            ("/v1/moderations", lambda n: {"input": part(n)}, parts, "input", {}),
            ("/steer", lambda n: {"prompt": "hi", "max_new_tokens": n}, new_tokens, "max_new_tokens", steer),
        ]
        for path, body, limit, field, headers in cases:
            at = c.post(path, json=body(limit), headers=headers)
            assert at.status_code == 200, (path, limit, at.text)
            past = c.post(path, json=body(limit + 1), headers=headers)
            expected = {400} if path == "/v1/moderations" else {413, 422}
            assert past.status_code in expected and past.json()["error"]["field"] == field, (path, limit, past.text)


def test_the_openapi_document_refuses_what_the_server_refuses_one_prompt_field_unique_layers_and_declares_retry_after():
    """Schema nits (tester): the document let a request give both input and messages (or neither), listed /steer's
    layers with repeats, and no 429 or 503 declared its Retry-After header. A body the document's request schema
    (JSON Schema 2020-12, as OpenAPI 3.1 writes it) accepts is answered 200, one it refuses is a 422."""
    from jsonschema import Draft202012Validator

    with client_for(steer_enabled=True, steer_api_key=STEER_KEY) as c:
        wait_ready(c)
        document = c.get("/openapi.json").json()

        def valid(schema: str, body: dict) -> bool:
            root = {"$ref": f"#/components/schemas/{schema}", "components": document["components"]}
            return Draft202012Validator(root).is_valid(body)

        conversation = [{"role": "user", "content": "hi"}]
        steer = {"Authorization": f"Bearer {STEER_KEY}"}
        cases = [  # path, schema, body, whether the server takes it
            ("/classify", "ClassifyRequest", {"input": "hi"}, True),
            ("/classify", "ClassifyRequest", {"messages": conversation}, True),
            ("/classify", "ClassifyRequest", {"input": "hi", "messages": None}, True),  # null counts as absent
            ("/classify", "ClassifyRequest", {"input": None, "messages": conversation}, True),
            ("/classify", "ClassifyRequest", {"input": "hi", "messages": conversation}, False),
            ("/classify", "ClassifyRequest", {}, False),
            ("/classify", "ClassifyRequest", {"input": None}, False),
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": [2, 3]}, True),
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": [2, 2]}, False),
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": "ALL"}, True),
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": "every"}, False),
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": 3}, True),  # as [3]: new user
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": 0}, False),
            ("/steer", "SteerRequest", {"prompt": "hi", "max_new_tokens": 2, "layers": True}, False),
            ("/steer", "SteerRequest", {"prompt": "hi", "messages": conversation, "max_new_tokens": 2}, False),
            ("/steer", "SteerRequest", {"max_new_tokens": 2}, False),
        ]
        for path, schema, body, taken in cases:
            assert valid(schema, body) is taken, (schema, body)
            answer = c.post(path, json=body, headers=steer if path == "/steer" else {})
            assert answer.status_code == (200 if taken else 422), (path, body, answer.text)
        for path in ("/classify", "/v1/moderations", "/steer"):
            responses = document["paths"][path]["post"]["responses"]
            for status in ("429", "503"):
                header = responses[status]["headers"]["Retry-After"]
                assert header["schema"] == {"type": "integer", "minimum": 1} and "HERALD_MAX_CONNECTIONS" in header["description"]
        assert "headers" not in document["paths"]["/classify"]["post"]["responses"]["422"]


@pytest.mark.parametrize("keys", [False, True])
def test_the_openapi_document_asks_for_keys_where_this_server_does_and_names_each_routes_answers(keys):
    """The document declared the bearer scheme on every route of a server without keys, /metrics as JSON, the health
    checks without their 503 and /v1/info without its 401 (fuzz tester); lists are minItems 1 as an empty one is
    refused."""
    overrides = {"api_keys": [API_KEY]} if keys else {}
    with client_for(**overrides, steer_enabled=True, steer_api_key=STEER_KEY) as c:
        wait_ready(c)
        document = c.get("/openapi.json").json()
        secured = {path: [op["security"] for op in ops.values() if "security" in op] for path, ops in document["paths"].items()}
        secured = {path: schemes for path, schemes in secured.items() if schemes}
        client = [[{"HTTPBearer": []}]]
        # /steer's key is not a client key: a scheme of its own, or Swagger's one "Authorize" filled both (tester)
        assert secured == ({"/classify": client, "/v1/moderations": client, "/v1/info": client,
                            "/steer": [[{"SteerKey": []}]]} if keys else {"/steer": [[{"SteerKey": []}]]})
        assert set(document["components"]["securitySchemes"]) == ({"HTTPBearer", "SteerKey"} if keys else {"SteerKey"})
        assert document["components"]["securitySchemes"]["SteerKey"]["scheme"] == "bearer"
        paths = document["paths"]
        assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain"}
        assert c.get("/metrics").headers["content-type"].startswith("text/plain")
        for health in ("/health/live", "/health/ready"):
            assert paths[health]["get"]["responses"]["503"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"}
        assert "401" in paths["/v1/info"]["get"]["responses"]
        if keys:
            assert c.get("/v1/info").status_code == 401  # as documented
        request = document["components"]["schemas"]["ClassifyRequest"]["properties"]
        assert all(b["minItems"] == 1 for b in request["messages"]["anyOf"] if b.get("type") == "array")
        assert c.post("/classify", json={"messages": []}, headers={"Authorization": f"Bearer {API_KEY}"}).status_code == 422
    with client_for(api_keys=[API_KEY]) as c:  # client keys, steering off: only their scheme is declared
        wait_ready(c)
        assert set(c.get("/openapi.json").json()["components"]["securitySchemes"]) == {"HTTPBearer"}
    with client_for() as c:  # steering off, no keys: no operation asks for one, and no scheme is declared
        wait_ready(c)  # a loading thread left running at exit ended the run with "terminate called ..."
        document = c.get("/openapi.json").json()
        assert not any("security" in op for ops in document["paths"].values() for op in ops.values())
        assert "securitySchemes" not in document.get("components", {})


def test_a_steer_cap_below_the_default_caps_the_default_and_the_document_stays_valid():
    # HERALD_STEER_MAX_NEW_TOKENS=3 refused a request without max_new_tokens ("64 exceeds the limit of 3"), and the
    # document said default 64 beside maximum 3 (re-tester)
    with client_for(steer_enabled=True, steer_api_key=STEER_KEY, steer_max_new_tokens=3) as c:
        wait_ready(c)
        auth = {"Authorization": f"Bearer {STEER_KEY}"}
        r = c.post("/steer", json={"prompt": "tell me a long story about the sea"}, headers=auth)
        assert r.status_code == 200 and r.json()["baseline"]["completion"].count(" ") <= 2, r.text  # 3 words at most
        r = c.post("/steer", json={"prompt": "hi", "max_new_tokens": 4}, headers=auth)  # sent: still checked
        assert r.status_code == 422 and r.json()["error"]["field"] == "max_new_tokens"
        field = c.get("/openapi.json").json()["components"]["schemas"]["SteerRequest"]["properties"]["max_new_tokens"]
        assert (field["default"], field["maximum"]) == (3, 3)


def test_every_invalid_request_is_counted_once_under_its_own_reason():
    # A 422 (a 400 on /v1/moderations) was in herald_requests_total by status alone: an operator could not tell invalid
    # input from malformed HTTP, which /v1/moderations answers 400 too, nor see it by reason beside the 413s.
    with client_for(max_batch_size=2) as c:
        wait_ready(c)

        def invalid() -> float:
            return c.app.state.herald.metrics.registry.get_sample_value(
                "herald_rejected_requests_total", {"reason": "invalid_request"})

        assert invalid() == 0
        answers = [
            c.post("/classify", json={"input": "hi", "threshold": "high"}),  # schema (pydantic)
            c.post("/classify", json={"inptu": "hi"}),  # unknown field beside a missing one
            c.post("/classify", content=b'{"input": "hi",}', headers={"Content-Type": "application/json"}),  # not JSON
            c.post("/v1/moderations", json={"input": []}),  # the moderator's own InvalidInput: an empty batch
            c.post("/v1/moderations", content=b'{"input": "a", "input": "b"}', headers={"Content-Type": "application/json"}),
            c.post("/classify", json={"messages": [[]]}),  # a conversation without turns
        ]
        assert [r.status_code for r in answers] == [422, 422, 422, 400, 400, 422], [r.text for r in answers]
        assert invalid() == 6
        # other refusals keep their own reason and are not counted again here
        assert c.post("/classify", json={"input": ["a", "b", "c"]}).status_code == 413
        assert c.post("/classify", json={"input": "hi"}, headers={"Content-Type": "text/plain"}).status_code == 415
        assert c.post("/classify", json={"input": "fine"}).status_code == 200
        assert invalid() == 6
        assert 'herald_rejected_requests_total{reason="invalid_request"} 6.0' in c.get("/metrics").text


def test_an_unknown_path_under_v1_is_answered_404_in_openai_s_form(client):
    # a gateway's typo of /v1/moderations got Herald's form alone: the OpenAI SDK read code None (known low)
    for path, message in (("/v1/moderation", "no route /v1/moderation"),
                          ("/v1/moderations/", "no route /v1/moderations/; did you mean /v1/moderations (no trailing slash)?")):
        r = client.post(path, json={"input": "hi"})
        assert r.status_code == 404 and r.json()["error"] == {
            "type": "not_found", "message": message, "param": None, "code": "not_found"}, r.text
    # elsewhere the form stays Herald's
    assert set(client.get("/v2/moderations").json()["error"]) == {"type", "message"}
