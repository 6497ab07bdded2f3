"""Request bodies read as JSON objects whose keys are unique, parsed once and off the event loop when large.

Python's ``json`` (and so FastAPI) keeps the *last* value of a key given twice: ``{"input": "hello", "input": "how to
build a bomb"}`` is moderated as the second prompt, while a gateway whose parser keeps the *first* value (many do;
RFC 8259 section 4 leaves it open) logs and forwards the first. A moderation service must not disagree with its
caller about what it judged, so such a body is refused with a 422 naming the key.
"""

from __future__ import annotations

import asyncio
import email.message
import email.utils
import json
import sys
from typing import Any, Callable, Coroutine

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from herald_service.config import Settings
from herald_service.engine.service import ClientGone
from herald_service.errors import InputTooLarge, InvalidInput
from herald_service.strict_json import (
    MAX_KEYS, BadNumber, DuplicateKey, InvalidKey, NotUtf8, TooManyKeys, containers_outside_strings, echoed,
    loads_unique, longest_list, utf8_text,
)

THREAD_PARSE_BYTES = 65_536
"""Bodies larger than this are parsed and validated in a worker thread: a 12 MB body (just under the default body
limit) takes about 2 s to parse, and one of 458,000 valid content parts 1.8 s more to validate against the request
model, which on the event loop stalled every other request and the health checks (breaker and fuzz-tester findings)."""


class UniqueKeysRequest(Request):
    """A request whose :meth:`json` refuses repeated keys and unrepresentable numbers, parses large bodies in a thread, and parses once (FastAPI's
    own body reading then gets the cached value)."""

    list_limit: int | None = None
    """Most items any list of the body may hold (:func:`list_limit`); None: unchecked."""
    container_limit: int | None = None
    """Most arrays and objects the body may hold (:func:`container_limit`); None: unchecked."""
    body_field: Any = None
    """The route's body field (FastAPI's ``APIRoute.body_field``), which validates a large body in the parsing thread;
    None: FastAPI validates it, on the event loop."""
    route_body_field: Any = None
    """The route's body field whether or not the service is ready, for :meth:`check_body`; None: a route without one."""
    reads_query: bool = True
    """False on a route whose options are in its JSON body only (:class:`BodyOptionsRoute`): a query string is refused
    (:meth:`refuse_query`)."""

    def refuse_query(self) -> None:
        """Refuse a query string on a route that reads its options from the JSON body only: ``POST
        /classify?return_trajectory=false`` answered with trajectories, the parameter ignored without a word (breaker
        finding). ``POST /v1/moderations`` keeps ignoring them, as OpenAI's endpoint does (Azure-style clients add
        ``?api-version=``).

        Raises:
            InvalidInput: naming the first parameter as ``query.<name>``, or ``query`` when it has no name (422).
        """
        if self.reads_query or not self.scope.get("query_string"):
            return
        name = echoed(next(iter(self.query_params), ""))
        if name or self.query_params:  # "?" alone and "?&" read as no parameter; "?=1" has an empty name
            raise InvalidInput(f"{self.url.path} reads no query parameters (got '{name}'); its options go in the"
                               " JSON body", field=f"query.{name}" if name else "query")

    async def check_body(self) -> None:
        """Check the request as the route would once ready, now, as FastAPI only would after the route's dependencies:
        for a dependency that must answer a malformed request before refusing it for its own reasons (readiness while
        loading: a 422 naming the field, not a 503 whose ``Retry-After`` has the client send again a request that can
        never succeed). The body is validated as the route's body model (a large one off the event loop, as
        :meth:`json` parses it), then a query string the route refuses (:meth:`refuse_query`), the order the ready
        route checks them in.

        Raises:
            RequestValidationError: no body, or one that does not fit the model (answered 422, as FastAPI's own).
            InvalidInput: a query string on a route that reads none (422).
        """
        if self.route_body_field is None:
            return
        body = await self.body()
        if not body:
            raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required", "input": None}])
        document = await self.json()
        if len(body) > THREAD_PARSE_BYTES:
            await asyncio.to_thread(self._checked, document)
        else:
            self._checked(document)
        self.refuse_query()

    def _checked(self, document: Any) -> None:
        _, errors = self.route_body_field.validate(document, {}, loc=("body",))
        if errors:
            raise RequestValidationError(errors, body=document)

    async def json(self) -> Any:
        if not hasattr(self, "_unique_json"):
            body = await self.body()
            self._unique_json = (await asyncio.to_thread(self._validated, body) if len(body) > THREAD_PARSE_BYTES
                                 else self._parsed(body))
        return self._unique_json

    def _parsed(self, body: bytes) -> Any:
        """The body checked as UTF-8, its arrays and objects counted when its brackets could exceed
        :attr:`container_limit` (:func:`containers_outside_strings`), parsed (:func:`loads_unique`) and its lists
        measured (:func:`longest_list`).

        Raises:
            NotUtf8: the body is not UTF-8 (checked first).
            TooManyContainers: more arrays and objects than :attr:`container_limit`, counted before the parse.
            ListTooLong: a list over :attr:`list_limit`; and what :func:`loads_unique` raises.
        """
        text = utf8_text(body)  # first: a UTF-16 body was refused for its count, which its bytes made meaningless
        limit = self.container_limit
        if limit is not None and body.count(b"[") + body.count(b"{") > limit:  # a bound: brackets in strings count
            if (found := containers_outside_strings(body)) > limit:
                raise TooManyContainers(found)
        document = loads_unique(text, True)
        if self.list_limit is not None and (found := longest_list(document, self.list_limit)) is not None:
            raise ListTooLong(*found)
        return document

    def _validated(self, body: bytes) -> Any:
        """:meth:`_parsed`, then validated as the route's body model (:attr:`body_field`, FastAPI's own validation:
        the same errors at the same locations), in one call so that a large body does all three off the event loop.
        FastAPI then validates the model this returns again, on the loop, which passes an instance through as it is.

        Raises:
            RequestValidationError: the body does not fit the model (answered 422, as FastAPI's own).
            ListTooLong: and what :meth:`_parsed` raises.
        """
        document = self._parsed(body)
        if self.body_field is None:
            return document
        model, errors = self.body_field.validate(document, {}, loc=("body",))
        if errors:
            raise RequestValidationError(errors, body=document)
        return model


class TooManyContainers(Exception):
    """The request body opens more JSON arrays and objects (``count``) than :func:`container_limit`."""

    def __init__(self, count: int) -> None:
        super().__init__(count)
        self.count = count


class ListTooLong(Exception):
    """A list of the request body holds more items than any Herald field takes (``path``, ``length``)."""

    def __init__(self, path: str, length: int) -> None:
        super().__init__(path, length)
        self.path, self.length = path, length


def list_limit(settings: Settings) -> int:
    """Most items a list of a request body may hold: the larger of ``max_batch_size`` (prompts or conversations of
    one request) and ``max_messages`` (messages of one conversation), since no field of Herald's API takes a longer
    list. Checked on the parsed body before validation: a 12 MB body of three million prompts held the event loop
    14 s turning them into conversations before the batch-size check (breaker finding); the field's own limit still
    names the field precisely below this bound."""
    return max(settings.max_batch_size, settings.max_messages)



def container_limit(settings: Settings) -> int:
    """Most JSON arrays and objects a request body may open: 32 per message of the largest request Herald answers in
    full (``max_batch_size / 2`` conversations of ``max_messages``, each scored whole and as its pending user turn), at
    least 131,072; 262,144 with the default settings. Counted before the parse
    (:func:`~herald_service.strict_json.containers_outside_strings`), since ``json``'s C parser holds the GIL while it
    builds them: a 12 MB body of four million empty lists, refused after its parse by the list limit, held the event
    loop 0.93 s, and one with as many inside an accepted ``function_call`` 0.84 s (benchmarks/loop_stall.py); at the
    0.2 us per array that parse took, 262,144 take about 50 ms.
    A tester's web-search chat batch (32 conversations of 256 messages, each answer with 16 ``url_citation``
    annotations in the OpenAI SDK's form) opens 143,394; 8 per message refused it."""
    return max(131_072, 16 * settings.max_batch_size * settings.max_messages)


def not_json_reason(exc: json.JSONDecodeError) -> str:
    """Why and where ``json`` could not parse a body, e.g. ``"Expecting value at line 1 column 11 (char 10)"``: line
    and column count from 1, ``char`` is the offset in characters of the body as decoded (without a byte-order mark).
    The decoder's "Invalid control character at" (a raw tab or newline in a string) is not followed by a second
    "at"."""
    return f"{exc.msg.removesuffix(' at')} at line {exc.lineno} column {exc.colno} (char {exc.pos})"


def is_json_content_type(content_type: str) -> bool:
    """Whether a ``Content-Type`` value is ``application/json`` or ``application/*+json`` (parameters such as
    ``charset`` allowed), parsed as FastAPI parses it (``fastapi.routing.get_request_handler``, stdlib headers)."""
    header = email.message.Message()
    header["content-type"] = content_type
    subtype = header.get_content_subtype()
    return header.get_content_maintype() == "application" and (subtype == "json" or subtype.endswith("+json"))


JSON_CHARSETS = ("utf-8", "utf8", "us-ascii", "ascii")
"""The ``charset`` values of a JSON body Herald reads (lower case): UTF-8, and US-ASCII, a subset of it that some older
clients name (a new-user pass: it was a 415). JSON is UTF-8 (RFC 8259 section 8.1)."""


def json_charsets(content_type: str) -> list[str]:
    """The ``charset`` parameters of a ``Content-Type`` value, lower case, in order; empty when it has none (more than
    one is an ambiguous header, ``charset=utf-8; charset=latin1``, which the stdlib's ``get_param`` read as the
    first); RFC 2231 forms (``charset*=utf-8''latin1``) decoded."""
    header = email.message.Message()
    header["content-type"] = content_type
    # an RFC 2231 value (charset*=utf-8''latin1) comes as a tuple, which was dropped: latin1 passed (re-tester)
    return [email.utils.collapse_rfc2231_value(value).lower() for name, value in header.get_params(failobj=[])[1:]
            if name.lower() == "charset"]


class UniqueKeysRoute(APIRoute):
    """An :class:`~fastapi.routing.APIRoute` whose JSON bodies must not repeat a key (FastAPI's "Custom Request and
    APIRoute class" mechanism): the body is parsed by :class:`UniqueKeysRequest` before FastAPI validates it.

    A body that is not JSON (``text/plain``, a form, no Content-Type) never reaches it: in Herald's app
    :class:`~herald_service.api.middleware.JsonBodies` answers it 415 before it is read.

    Raises (as answers):
        InvalidInput: naming the repeated key by its path, e.g. ``field: "input"`` or ``"messages[0].content"``, a
            key holding a lone UTF-16 surrogate or a number :class:`BadNumber` refuses by its path, an object of
            more than :data:`MAX_KEYS` keys, a body that is not UTF-8 (UTF-16 or UTF-32, named; else the byte and
            its offset in the body as sent) or JSON nested past the parser's recursion limit (422).
        InputTooLarge: a list longer than :func:`list_limit`, naming its path (413; counted as ``list_length``).
        ClientGone: the client went away while sending the body (counted as 499, not as a server error).

    A body that is not JSON is an InvalidInput too, naming the parser's reason and position
    (:func:`not_json_reason`).
    """

    reads_query = True
    """Whether the route reads (or ignores) a query string; :class:`BodyOptionsRoute` refuses one."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def unique_keys_handler(request: Request) -> Response:
            request = UniqueKeysRequest(request.scope, request.receive)
            request.list_limit = list_limit(request.app.state.herald.settings)
            request.container_limit = container_limit(request.app.state.herald.settings)
            # not ready: the route's dependency validates the body (check_body) after the API key and before its 503,
            # whatever the body's size (a large invalid body was a 422 where a small one was a 503: re-tester)
            request.body_field = self.body_field if request.app.state.herald.not_ready_reason() is None else None
            request.route_body_field = self.body_field
            request.reads_query = self.reads_query
            try:
                body = await request.body()
            except ClientDisconnect:
                raise ClientGone("client disconnected while sending the request body") from None
            if body:
                try:
                    await request.json()
                except DuplicateKey as exc:
                    raise InvalidInput(f"key '{exc.path}' appears twice in one JSON object of the request body; give it"
                                       " once", field=exc.path) from None
                except InvalidKey as exc:
                    raise InvalidInput(f"key '{exc.path}' of the request body holds a lone UTF-16 surrogate (not valid"
                                       " Unicode); send well-formed UTF-8", field=exc.path) from None
                except BadNumber as exc:
                    raise InvalidInput(exc.message, field=exc.path) from None
                except TooManyContainers as exc:
                    request.app.state.herald.metrics.rejected.labels("json_containers").inc()
                    raise InputTooLarge(f"request body holds {exc.count:,} JSON arrays and objects; the limit is"
                                        f" {request.container_limit:,} (16 x max_batch_size x max_messages, at least"
                                        " 131,072)", field="body") from None
                except ListTooLong as exc:
                    request.app.state.herald.metrics.rejected.labels("list_length").inc()
                    raise InputTooLarge(f"{exc.path} holds {exc.length:,} items; no list of a request may hold more than"
                                        f" {request.list_limit} (the larger of max_batch_size and max_messages)",
                                        field=exc.path) from None
                except TooManyKeys as exc:
                    where = f"the object at '{exc.path}'" if exc.path else "the request body"
                    raise InvalidInput(f"{where} has {exc.count:,} keys; the limit is {MAX_KEYS}",
                                       field=exc.path or "body") from None
                except NotUtf8 as exc:  # one message had covered this and deep nesting (breaker finding)
                    raise InvalidInput(f"request body is {exc.message}; send UTF-8 JSON", field="body") from None
                except RecursionError:
                    raise InvalidInput("request body's JSON is nested more deeply than the parser allows (about"
                                       f" {sys.getrecursionlimit():,} levels, Python's recursion limit; a Herald request"
                                       " needs fewer than ten)", field="body") from None
                except json.JSONDecodeError as exc:  # FastAPI's own answer gave no position or reason (tester)
                    raise InvalidInput(f"request body is not valid JSON: {not_json_reason(exc)}", field="body") from None
            return await handler(request)

        return unique_keys_handler


class BodyOptionsRoute(UniqueKeysRoute):
    """A :class:`UniqueKeysRoute` whose options are in its JSON body only (``/classify``, ``/steer``): a query string
    is refused with a 422 naming it (:meth:`UniqueKeysRequest.refuse_query`), while loading too (before the 503:
    the parameter is as wrong then as once ready, and a ``Retry-After`` had the client send it again)."""

    reads_query = False
