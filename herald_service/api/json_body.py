"""Request bodies read as JSON objects whose keys are unique, parsed once and off the event loop when large.

Python's ``json`` (and so FastAPI) keeps the *last* value of a key given twice: ``{"input": "hello", "input": "how to
build a bomb"}`` is moderated as the second prompt, while a gateway whose parser keeps the *first* value (many do;
RFC 8259 section 4 leaves it open) logs and forwards the first. A moderation service must not disagree with its
caller about what it judged, so such a body is refused with a 422 naming the key.
"""

from __future__ import annotations

import asyncio
import email.message
import json
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.datastructures import DefaultPlaceholder
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from herald_service.engine.service import ClientGone
from herald_service.errors import InvalidInput

THREAD_PARSE_BYTES = 65_536
"""Bodies larger than this are parsed in a worker thread: a 12 MB body (just under the default body limit) takes
about 2 s to parse, which on the event loop stalled every other request and the health checks (breaker finding)."""
KEY_ECHO_CHARS = 64
"""A repeated key is echoed in the error up to this many characters."""
MAX_KEYS = 256
"""Keys in one JSON object of a body. Herald's request objects have at most 7; an object of 600,000 unknown keys
(7 MB, under the body limit) cost 3 s of pydantic validation on the event loop, which stalls every request (breaker
finding), so such a body is refused while it is parsed, off the loop."""


class DuplicateKey(ValueError):
    """A JSON object of the body holds ``key`` twice."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class TooManyKeys(ValueError):
    """A JSON object of the body holds more than :data:`MAX_KEYS` keys."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads`: the object as a dict, or :class:`DuplicateKey` /
    :class:`TooManyKeys`."""
    if len(pairs) > MAX_KEYS:
        raise TooManyKeys(len(pairs))
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise DuplicateKey(key)
        seen[key] = value
    return seen


def loads_unique(body: bytes) -> Any:
    """:func:`json.loads` that refuses a repeated key.

    Raises:
        DuplicateKey: a key given twice in one object.
        TooManyKeys: an object with more than :data:`MAX_KEYS` keys.
        ValueError, RecursionError: not JSON, not UTF-8, or nested too deeply (as :func:`json.loads`).
    """
    return json.loads(body, object_pairs_hook=_unique_keys)


class UniqueKeysRequest(Request):
    """A request whose :meth:`json` refuses repeated keys, parses large bodies in a thread, and parses once (FastAPI's
    own body reading then gets the cached value)."""

    async def json(self) -> Any:
        if not hasattr(self, "_unique_json"):
            body = await self.body()
            self._unique_json = await asyncio.to_thread(loads_unique, body) if len(body) > THREAD_PARSE_BYTES else loads_unique(body)
        return self._unique_json


def _shown(key: str) -> str:
    """``key`` as ASCII JSON text (lone surrogates and control characters escaped), cut to :data:`KEY_ECHO_CHARS`."""
    text = json.dumps(key)[1:-1]
    return text if len(text) <= KEY_ECHO_CHARS else text[:KEY_ECHO_CHARS] + "..."


class UniqueKeysRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose JSON bodies must not repeat a key (FastAPI's "Custom Request and
    APIRoute class" mechanism): the body is parsed by :class:`UniqueKeysRequest` before FastAPI validates it.

    Only a body that FastAPI itself reads as JSON (:meth:`reads_json`) is checked, so a body sent as ``text/plain`` or
    a form gets FastAPI's content-type answer whatever keys it repeats.

    Raises (as answers):
        InvalidInput: naming the repeated key, e.g. ``field: "input"`` (nested keys are named without their path),
            or an object of more than :data:`MAX_KEYS` keys (422).
        ClientGone: the client went away while sending the body (counted as 499, not as a server error).
    """

    def reads_json(self, request: Request) -> bool:
        """Whether FastAPI parses this request's body as JSON: a Content-Type of ``application/json`` or
        ``application/*+json``, or none at all on a route that is not ``strict_content_type`` (FastAPI's rule in
        ``fastapi.routing.get_request_handler``, with the same stdlib header parsing). Other bodies reach validation
        as bytes and are answered "request body must be a JSON object (Content-Type: application/json)"."""
        content_type = request.headers.get("content-type")
        if not content_type:
            strict = self.strict_content_type
            return not (strict.value if isinstance(strict, DefaultPlaceholder) else strict)
        header = email.message.Message()
        header["content-type"] = content_type
        subtype = header.get_content_subtype()
        return header.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def unique_keys_handler(request: Request) -> Response:
            request = UniqueKeysRequest(request.scope, request.receive)
            try:
                body = await request.body()
            except ClientDisconnect:
                raise ClientGone("client disconnected while sending the request body") from None
            if body and self.reads_json(request):
                try:
                    await request.json()
                except DuplicateKey as exc:
                    key = _shown(exc.key)
                    raise InvalidInput(f"key '{key}' appears twice in one JSON object of the request body; give it"
                                       " once", field=key) from None
                except TooManyKeys as exc:
                    raise InvalidInput(f"a JSON object of the request body has {exc.args[0]} keys; the limit is {MAX_KEYS}",
                                       field="body") from None
                except (ValueError, RecursionError):
                    pass  # not JSON, not UTF-8, or nested too deeply: FastAPI's own parsing answers it (a 422)
            return await handler(request)

        return unique_keys_handler
