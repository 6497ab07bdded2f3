"""``POST /v1/moderations``: the OpenAI moderation request/response shape, so gateways switch with a URL change.

Herald measures one thing, harmfulness, so ``categories`` and ``category_scores`` carry one key, ``harmful``;
``flagged`` is the decision.
"""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Request, Response

from herald_service.api.deps import ServingModerator, disconnect_watch
from herald_service.api.json_body import UniqueKeysRoute
from herald_service.api.routes.classify import ERRORS, json_answer
from herald_service.api.schemas import ModerationRequest, ModerationResponse
from herald_service.types import user_turn

router = APIRouter(tags=["moderation"], route_class=UniqueKeysRoute)

CATEGORY = "harmful"


@router.post("/v1/moderations", response_model=ModerationResponse, responses=ERRORS)
async def moderations(body: ModerationRequest, request: Request, moderator: ServingModerator) -> Response:
    """OpenAI-compatible moderation of a string, a list of strings (one result each), or the text parts of one
    multimodal input (one result)."""
    if isinstance(body.input, str):
        texts, fields = [body.input], ["input"]
    elif body.input and not isinstance(body.input[0], str):
        # OpenAI's content parts are one input (as in a chat message): one result for all of them, not one per part.
        texts, fields = ["\n".join(part.text for part in body.input)], ["input"]  # type: ignore[union-attr]
    else:
        texts = list(body.input)  # type: ignore[arg-type]
        fields = [f"input[{i}]" for i in range(len(texts))]
    results, timing = await moderator.classify([user_turn(t) for t in texts], fields, "input", disconnect_watch(request))
    moderator.metrics.observe_decisions("/v1/moderations", results)
    return json_answer(
        {
            "id": f"modr-{secrets.token_hex(16)}",  # 32 random hex digits, as uuid4().hex gave, without building a UUID
            "model": f"herald/{moderator.runtime.backbone.info.slug}",  # what ran, not the client's model name
            "results": [
                {
                    "flagged": r.flagged,
                    "categories": {CATEGORY: r.flagged},
                    "category_scores": {CATEGORY: r.score},
                    "category_applied_input_types": {CATEGORY: ["text"]},
                }
                for r in results
            ],
        },
        timing,
    )
