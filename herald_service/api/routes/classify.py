"""``POST /classify``: Herald's own moderation API."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from herald_service.api.deps import ApiKey, ModeratorDep, State, disconnect_watch
from herald_service.api.schemas import ChatMessage, ClassifyRequest, ClassifyResponse, ClassifyResult, ErrorBody
from herald_service.types import Classification, Conversation, Message, Timing, user_turn

router = APIRouter(tags=["moderation"])

ERRORS = {code: {"model": ErrorBody} for code in (401, 413, 422, 429, 503, 504)}


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
    return tuple(Message(m.role, m.content) for m in messages)


def result_body(result: Classification, with_trajectory: bool = True) -> ClassifyResult:
    """The HTTP shape of one verdict."""
    return ClassifyResult(
        flagged=result.flagged,
        score=result.score,
        logit=result.logit,
        threshold=result.threshold,
        tokens=result.tokens,
        features=result.features,  # type: ignore[arg-type]
        trajectory=result.trajectory if with_trajectory else None,
        onset_layer=result.onset_layer,
    )


def timing_headers(response: Response, timing: Timing) -> None:
    """``x-*-time`` headers in milliseconds (TEI style)."""
    for name, seconds in (
        ("x-tokenize-time", timing.tokenize_s),
        ("x-queue-time", timing.queue_s),
        ("x-inference-time", timing.forward_s),
        ("x-score-time", timing.score_s),
    ):
        response.headers[name] = f"{seconds * 1000:.2f}"
    response.headers["x-batch-size"] = str(timing.batch_size)


def record_decisions(state: State, route: str, results: list[Classification]) -> None:
    for result in results:
        state.metrics.decisions.labels(route, "flagged" if result.flagged else "allowed").inc()
        state.metrics.score.observe(result.score)


@router.post("/classify", response_model=ClassifyResponse, responses=ERRORS, dependencies=[ApiKey])
async def classify(body: ClassifyRequest, request: Request, response: Response, moderator: ModeratorDep, state: State) -> ClassifyResponse:
    """Classify one or more prompts or conversations; results in input order."""
    conversations, fields, batch_field = to_conversations(body)
    results, timing = await moderator.classify(conversations, fields, batch_field, disconnect_watch(request))
    timing_headers(response, timing)
    record_decisions(state, "/classify", results)
    runtime = moderator.runtime
    return ClassifyResponse(
        model=runtime.backbone.info.model_id,
        probe=runtime.probe_path,
        results=[result_body(r, body.return_trajectory) for r in results],
    )
