"""``POST /v1/moderations``: the OpenAI moderation request/response shape, so gateways switch with a URL change.

Herald measures one thing, harmfulness, so ``categories`` and ``category_scores`` carry one key, ``harmful``;
``flagged`` is the decision.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from herald_service.api.deps import ApiKey, ModeratorDep, State, disconnect_watch
from herald_service.api.routes.classify import ERRORS, record_decisions, timing_headers
from herald_service.api.schemas import ModerationRequest, ModerationResponse, ModerationResult
from herald_service.types import user_turn

router = APIRouter(tags=["moderation"])

CATEGORY = "harmful"


@router.post("/v1/moderations", response_model=ModerationResponse, responses=ERRORS, dependencies=[ApiKey])
async def moderations(body: ModerationRequest, request: Request, response: Response, moderator: ModeratorDep, state: State) -> ModerationResponse:
    """OpenAI-compatible moderation of a string, a list of strings, or a list of text parts."""
    if isinstance(body.input, str):
        texts, fields = [body.input], ["input"]
    else:
        texts = [item if isinstance(item, str) else item.text for item in body.input]
        fields = [f"input[{i}]" for i in range(len(texts))]
    results, timing = await moderator.classify([user_turn(t) for t in texts], fields, "input", disconnect_watch(request))
    timing_headers(response, timing)
    record_decisions(state, "/v1/moderations", results)
    return ModerationResponse(
        id=f"modr-{uuid.uuid4().hex}",
        model=body.model or f"herald/{moderator.runtime.backbone.info.slug}",
        results=[
            ModerationResult(
                flagged=r.flagged,
                categories={CATEGORY: r.flagged},
                category_scores={CATEGORY: r.score},
                category_applied_input_types={CATEGORY: ["text"]},
            )
            for r in results
        ],
    )
