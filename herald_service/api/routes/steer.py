"""``POST /steer``: directional ablation (or activation addition) of the harm direction during generation.

Off unless ``HERALD_STEER_ENABLED``; needs ``HERALD_STEER_API_KEY``. It removes a safety behaviour on purpose: for
ablation experiments only.
"""

from __future__ import annotations

from fastapi import APIRouter

from herald_service.api.deps import ModeratorDep, SteerKey, disconnect_watch
from herald_service.api.json_body import BodyOptionsRoute, UniqueKeysRequest
from herald_service.api.routes.classify import ERRORS, result_fields
from herald_service.api.schemas import ClassifyResult, Completion, SteerRequest, SteerResponse
from herald_service.types import user_turn

router = APIRouter(tags=["research"], route_class=BodyOptionsRoute)


@router.post("/steer", response_model=SteerResponse, responses={**ERRORS, 404: ERRORS[401]}, dependencies=[SteerKey])
async def steer(body: SteerRequest, request: UniqueKeysRequest, moderator: ModeratorDep) -> SteerResponse:
    """Baseline and steered greedy completions, refusal judgments, and Herald's verdict with and without the edit."""
    request.refuse_query()
    conversation = user_turn(body.prompt) if body.prompt is not None else tuple(m.turn() for m in body.messages or [])
    # the default (64) is capped at HERALD_STEER_MAX_NEW_TOKENS: under it, a request without the field was refused
    # naming a field it never sent (re-tester); a value sent is checked against it
    sent = "max_new_tokens" in body.model_fields_set
    max_new_tokens = body.max_new_tokens if sent else min(body.max_new_tokens, moderator.settings.steer_max_new_tokens)
    outcome = await moderator.steer(conversation, body.mode, body.layers, body.alpha, max_new_tokens, disconnect_watch(request),
                                    field="prompt" if body.prompt is not None else "messages", max_new_tokens_sent=sent)
    return SteerResponse(
        model=moderator.runtime.backbone.info.model_id,
        probe=moderator.runtime.probe_name,
        mode=body.mode,
        alpha=body.alpha,
        layers=outcome.layers,
        baseline=Completion(completion=outcome.baseline.text, refused=outcome.baseline_refused,
                            cut_short=outcome.baseline.cut_short),
        steered=Completion(completion=outcome.steered.text, refused=outcome.steered_refused,
                           cut_short=outcome.steered.cut_short),
        classification={
            "baseline": ClassifyResult.model_validate(result_fields(outcome.baseline_classification)),
            "steered": ClassifyResult.model_validate(result_fields(outcome.steered_classification)),
        },
    )
