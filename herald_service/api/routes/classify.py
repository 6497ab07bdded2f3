"""``POST /classify``: Herald's own moderation API."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic_core import to_json

from herald_service.api.deps import ServingModerator, disconnect_watch
from herald_service.api.json_body import BodyOptionsRoute, UniqueKeysRequest
from herald_service.api.schemas import ChatMessage, ClassifyRequest, ClassifyResponse, ErrorBody
from herald_service.types import Classification, Conversation, Timing, user_turn

router = APIRouter(tags=["moderation"], route_class=BodyOptionsRoute)

ERRORS = {code: {"model": ErrorBody} for code in (401, 408, 413, 415, 422, 429, 503, 504)}


def to_conversations(body: ClassifyRequest) -> tuple[list[Conversation], list[str], str]:
    """Conversations, the request field naming each one, and the batch field."""
    if body.input is not None:
        if isinstance(body.input, str):
            return [user_turn(body.input)], ["input"], "input"
        return [user_turn(t) for t in body.input], [f"input[{i}]" for i in range(len(body.input))], "input"
    messages = body.messages or []
    if messages and isinstance(messages[0], ChatMessage):
        return [_conversation(messages)], ["messages"], "messages"  # type: ignore[arg-type]
    return [_conversation(c) for c in messages], [f"messages[{i}]" for i in range(len(messages))], "messages"  # type: ignore[arg-type]


def _conversation(messages: list[ChatMessage]) -> Conversation:
    return tuple(m.turn() for m in messages)


def result_fields(result: Classification, with_trajectory: bool = True) -> dict[str, Any]:
    """The HTTP shape of one verdict (:class:`~herald_service.api.schemas.ClassifyResult`'s fields, in its order)."""
    return {
        "flagged": result.flagged,
        "score": result.score,
        "logit": result.logit,
        "threshold": result.threshold,
        "tokens": result.tokens,
        # the probe's own names, in its order: herald-v1's seven made a bands-v1 probe's answers 500s (tester)
        "features": dict(result.features),
        "trajectory": result.trajectory if with_trajectory else None,
        "onset_layer": result.onset_layer,
        "view": result.view,
        "view_text": result.view_text,
    }


def timing_headers(timing: Timing) -> dict[str, str]:
    """``x-*-time`` headers in milliseconds (TEI style), and the batch size."""
    return {
        "x-tokenize-time": f"{timing.tokenize_s * 1000:.2f}",
        "x-queue-time": f"{timing.queue_s * 1000:.2f}",
        "x-inference-time": f"{timing.forward_s * 1000:.2f}",
        "x-score-time": f"{timing.score_s * 1000:.2f}",
        "x-batch-size": str(timing.batch_size),
    }


def json_answer(fields: dict[str, Any], timing: Timing) -> Response:
    """A 200 whose body is ``fields`` encoded once.

    The routes build plain dicts in their response model's field order and return this instead of a model: FastAPI
    would validate a returned model against ``response_model`` again and then serialize it, twice the work for a
    body the route has just built from typed engine output. ``pydantic_core.to_json`` is the encoder pydantic itself
    uses, so the bytes equal ``model.model_dump_json()`` (non-finite floats as ``null``, as pydantic writes them).
    """
    return Response(to_json(fields, inf_nan_mode="null"), media_type="application/json", headers=timing_headers(timing))


@router.post("/classify", response_model=ClassifyResponse, responses=ERRORS)
async def classify(body: ClassifyRequest, request: UniqueKeysRequest, moderator: ServingModerator) -> Response:
    """Classify one or more prompts or conversations; results in input order."""
    request.refuse_query()
    conversations, fields, batch_field = to_conversations(body)
    results, timing = await moderator.classify(conversations, fields, batch_field, disconnect_watch(request))
    moderator.metrics.observe_decisions("/classify", results)
    runtime = moderator.runtime
    return json_answer(
        {
            "model": runtime.backbone.info.model_id,
            "probe": runtime.probe_name,
            "results": [result_fields(r, body.return_trajectory) for r in results],
        },
        timing,
    )
