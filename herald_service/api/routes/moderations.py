"""``POST /v1/moderations``: the OpenAI moderation request/response shape, so gateways switch with a URL change.

Herald measures one thing, harmfulness: ``flagged`` is the decision, and ``categories`` / ``category_scores`` carry it
under Herald's own key ``harmful`` and under every category name of OpenAI's API (:data:`OPENAI_CATEGORIES`), each
with the same verdict and score. A gateway that checks ``categories.violence`` (typed fields of OpenAI's SDK) instead
of ``flagged`` then blocks what Herald flags; with ``harmful`` alone every such field read ``None`` and the gateway let
everything through (breaker pass, 2026-12-01). The names say where a verdict is read, not which kind of harm it is.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request, Response

from herald_service.api.deps import ServingModerator, disconnect_watch
from herald_service.api.json_body import UniqueKeysRoute
from herald_service.api.routes.classify import json_answer
from herald_service.api.schemas import ModerationRequest, ModerationResponse, OpenAIErrorBody, TextPart
from herald_service.engine.service import highest_scoring
from herald_service.errors import InputTooLarge
from herald_service.types import user_turn

router = APIRouter(tags=["moderation"], route_class=UniqueKeysRoute)

CATEGORY = "harmful"

OPENAI_CATEGORIES = ("harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
                     "self-harm", "self-harm/intent", "self-harm/instructions", "sexual", "sexual/minors", "violence",
                     "violence/graphic")
"""The category names of OpenAI's moderation response (API reference, ``omni-moderation-latest``; the fields of the
``openai`` SDK's ``Categories``, 2026)."""

CATEGORIES = (CATEGORY, *OPENAI_CATEGORIES)

ERRORS: dict[int | str, dict] = {code: {"model": OpenAIErrorBody} for code in (400, 401, 408, 415, 429, 503, 504)}
ERRORS["4XX"] = {"model": OpenAIErrorBody, "description": "Other client errors (405 for another method)"}
"""The route's error answers: OpenAI's 400 for invalid or too-large input, where /classify answers 422 and 413. The
``4XX`` entry also keeps FastAPI from listing its default 422 (HTTPValidationError), which this route never sends."""


def content_part_prompts(parts: list[TextPart], max_batch_size: int) -> tuple[list[str], list[str]]:
    """The prompts scored for OpenAI content parts, which are one input with one result: each part alone, then their
    texts joined with newlines when there are several; the result is the highest-scoring of them. The parts come
    first so that a refusal found in one part (a lone surrogate, its characters or tokens) names ``input[i].text``,
    not the join (breaker pass, 2026-12-02).

    Scored only joined, a harmful part followed by a benign one ("... build a pipe bomb" + "What is 2+2?") read as
    benign: Herald reads the last token, and the benign tail moved it (breaker pass: 1.0 alone, 0.016 joined).

    Raises:
        InputTooLarge: more parts than ``max_batch_size - 1`` (each part and the joined text are prompts of the
            request's batch), naming ``input`` and the limit.
    """
    texts = [part.text for part in parts]
    fields = [f"input[{i}].text" for i in range(len(texts))]
    if len(texts) == 1:
        return texts, fields
    if len(texts) + 1 > max_batch_size:
        raise InputTooLarge(f"input has {len(texts)} content parts; each is also scored alone, so the limit is"
                            f" {max_batch_size - 1} (max_batch_size - 1)", field="input")
    return [*texts, "\n".join(texts)], [*fields, "input"]


@router.post("/v1/moderations", response_model=ModerationResponse, responses=ERRORS)
async def moderations(body: ModerationRequest, request: Request, moderator: ServingModerator) -> Response:
    """OpenAI-compatible moderation of a string, a list of strings (one result each), or the text parts of one
    multimodal input (one result: :func:`content_part_prompts`)."""
    parts = body.input and not isinstance(body.input, str) and not isinstance(body.input[0], str)
    joined: dict[str, str] = {}  # how the token-limit refusal names the joined parts
    if isinstance(body.input, str):
        texts, fields = [body.input], ["input"]
    elif parts:
        try:
            texts, fields = content_part_prompts(body.input, moderator.settings.max_batch_size)  # type: ignore[arg-type]
        except InputTooLarge:
            moderator.metrics.rejected.labels("batch_size").inc()
            raise
        limit = moderator.settings.max_chars
        # Said "prompt has 40001 characters" of two 20,000 (breaker); a part over the limit alone is named by itself.
        if len(texts) > 1 and len(texts[-1]) > limit and all(len(text) <= limit for text in texts[:-1]):
            moderator.metrics.rejected.labels("characters").inc()
            raise InputTooLarge(f"input's {len(texts) - 1} content parts joined with newlines have {len(texts[-1])}"
                                f" characters; the limit is {limit} (max_chars), for the joined text as for each part",
                                field="input")
        if len(texts) > 1:  # said "prompt renders to 4132 tokens" of parts each under the limit (tester)
            joined["input"] = (f"input's {len(texts) - 1} content parts are joined with newlines (each is also scored"
                               " alone), and the joined prompt")
    else:
        texts = list(body.input)  # type: ignore[arg-type]
        fields = [f"input[{i}]" for i in range(len(texts))]
    part_inputs = len(texts) - 1 if parts and len(texts) > 1 else 0  # the parts scored alone beside their join
    results, timing = await moderator.classify([user_turn(t) for t in texts], fields, "input", disconnect_watch(request),
                                               joined, part_inputs=part_inputs)
    if parts:
        results = [highest_scoring(results)]
    moderator.metrics.observe_decisions("/v1/moderations", results)
    return json_answer(
        {
            "id": f"modr-{secrets.token_hex(16)}",  # 32 random hex digits, as uuid4().hex gave, without building a UUID
            "model": f"herald/{moderator.runtime.probe_name}",  # what ran, not the client's model name
            "results": [
                {
                    "flagged": r.flagged,
                    "categories": dict.fromkeys(CATEGORIES, r.flagged),
                    "category_scores": dict.fromkeys(CATEGORIES, r.score),
                    "category_applied_input_types": {name: ["text"] for name in CATEGORIES},
                    "view": r.view,  # Herald's: which prompt decided (/classify's fields; OpenAI's SDK keeps extras)
                    "view_text": r.view_text,
                }
                for r in results
            ],
        },
        timing,
    )
