"""Request bodies read as JSON objects whose keys are unique.

Python's ``json`` (and so FastAPI) keeps the *last* value of a key given twice: ``{"input": "hello", "input": "how to
build a bomb"}`` is moderated as the second prompt, while a gateway whose parser keeps the *first* value (many do;
RFC 8259 section 4 leaves it open) logs and forwards the first. A moderation service must not disagree with its
caller about what it judged, so such a body is refused with a 422 naming the key.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.routing import APIRoute

from herald_service.errors import InvalidInput


class DuplicateKey(ValueError):
    """A JSON object of the body holds ``key`` twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object as a dict, or :class:`DuplicateKey`."""
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


class UniqueKeysRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose JSON bodies must not repeat a key (FastAPI's custom route class
    mechanism, "Custom Request and APIRoute class" in its documentation). The body is parsed once more, with
    :func:`json.loads`' ``object_pairs_hook``, before FastAPI parses it.

    Raises (as a 422 answer):
        InvalidInput: naming the repeated key, e.g. ``field: "input"``.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def unique_keys_handler(request: Request) -> Response:
            body = await request.body()  # Starlette keeps it; FastAPI's parsing below reads the same bytes
            if body:
                try:
                    json.loads(body, object_pairs_hook=_unique_keys)  # parsed twice: ~1 ms for a 128 kB body
                except DuplicateKey as exc:
                    raise InvalidInput(f"key '{exc.key}' appears twice in one JSON object of the request body; give it"
                                       " once", field=exc.key) from None
                except (ValueError, RecursionError):
                    pass  # not JSON, not UTF-8, or nested too deeply: FastAPI's own parsing answers it (a 422)
            return await handler(request)

        return unique_keys_handler
