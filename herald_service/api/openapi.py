"""The app's OpenAPI document as this server runs: its request limits in the request schemas, and API keys only
where this server asks for them.

The limits are settings (``max_chars``, ``max_batch_size``, ``max_messages``, ``steer_max_new_tokens``), so the
pydantic models of :mod:`herald_service.api.schemas` cannot carry them; without them the document gave ``/steer``'s
``max_new_tokens`` no maximum and every text no length (tester), and a client generated from it, or a fuzzer reading
it, learnt the limits only from refusals. They are written into the generated document as JSON Schema's
``maxLength``, ``maxItems`` and ``maximum``: upper bounds the server enforces field by field (413 or 422). Some requests
within them are still refused: a conversation's turns together over ``max_chars``, a request whose pending turns or
content parts make more than ``max_batch_size`` prompts; ``GET /v1/info`` gives the same limits under ``limits``.
Every list of prompts, messages, parts or layers is ``minItems: 1`` (an empty one is refused); ``/steer``'s layers are
``uniqueItems``. ``/classify`` and ``/steer`` take exactly one of their two prompt fields (``oneOf``; a null one counts
as absent), and every 429 and 503 declares its ``Retry-After`` header.

Rules the document does not carry, which the server checks (a re-tester compared 89 bodies): a whole number written
``1.0`` (JSON Schema counts it an integer; the server's strict models do not), the top decoder layer of ``/steer``'s
``layers`` (the backbone's, known after the load: ``GET /v1/info``), ``mode``/``alpha`` together (``add`` needs an
``alpha``, ``ablate`` takes none), a message's ``content`` or a text part's ``text`` given as null or left out, and a
``refusal`` part outside an assistant message.

The bearer scheme is declared on the operations whose keys are set (``HERALD_API_KEYS``; ``/steer``: its key while
steering is on), as :class:`~herald_service.api.middleware.BearerGate` checks them: a document that asked for a key
everywhere told a client of a server without keys to send one (fuzz tester).
"""

from __future__ import annotations

from typing import Any, Callable

from fastapi import FastAPI

from herald_service.api.json_body import list_limit
from herald_service.config import Settings

_TEXT_FIELDS = {
    "ClassifyRequest": ("input", "messages"),
    "ModerationRequest": ("input",),
    "SteerRequest": ("prompt", "messages"),
    "ChatMessage": ("content",),
    "TextPart": ("text",),
    "MessagePart": ("text", "refusal"),
}
"""Schema name -> properties whose strings are prompt text and whose lists are prompts, messages or parts."""


def _is_string(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "string" and "enum" not in schema and "const" not in schema


def _limit(schema: dict[str, Any], settings: Settings, *, top: bool) -> None:
    """Write the limits into one property's schema (each branch of an ``anyOf``) in place. ``top``: a request's own
    field, where a list is one prompt per item (``max_batch_size``) or one conversation's messages."""
    for branch in schema.get("anyOf", [schema]):
        if _is_string(branch):
            branch["maxLength"] = settings.max_chars
        elif branch.get("type") == "array":
            branch["minItems"] = 1
            items = branch.get("items", {})
            ref = items.get("$ref", "")
            if ref.endswith("/ChatMessage"):
                branch["maxItems"] = settings.max_messages
            elif items.get("type") == "array":  # a list of conversations
                branch["maxItems"] = settings.max_batch_size
                items["minItems"], items["maxItems"] = 1, settings.max_messages
            elif _is_string(items):
                branch["maxItems"] = settings.max_batch_size
                items["maxLength"] = settings.max_chars
            elif ref.endswith("Part"):
                # /v1/moderations: several parts are each scored alone and joined (routes.moderations); a message's
                # parts: any list of a body (json_body.list_limit)
                branch["maxItems"] = max(1, settings.max_batch_size - 1) if top else list_limit(settings)


def with_request_limits(document: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """``document`` (an OpenAPI document FastAPI generated from Herald's routes) with the request limits of
    ``settings`` written into its request schemas, in place; returned for chaining.

    Raises:
        KeyError: a schema or property this module limits is missing from the document (a renamed model or field:
            the limits must follow it).
    """
    schemas = document["components"]["schemas"]
    for name, fields in _TEXT_FIELDS.items():
        for field in fields:
            _limit(schemas[name]["properties"][field], settings, top=name != "ChatMessage")
    new_tokens = schemas["SteerRequest"]["properties"]["max_new_tokens"]
    new_tokens["maximum"] = settings.steer_max_new_tokens
    new_tokens["default"] = min(new_tokens["default"], settings.steer_max_new_tokens)  # as routes.steer caps it
    layers = next(b for b in schemas["SteerRequest"]["properties"]["layers"]["anyOf"] if b.get("type") == "array")
    # 1-based, each once (types.checked_steer_layers); the top layer is the backbone's (GET /v1/info), unknown when
    # this document is first written, which can be before the load
    layers["minItems"], layers["items"]["minimum"], layers["uniqueItems"] = 1, 1, True
    every = next(b for b in schemas["SteerRequest"]["properties"]["layers"]["anyOf"] if b.get("const") == "all")
    del every["const"]
    every["pattern"] = "^[Aa][Ll][Ll]$"  # "ALL" is taken as "all" (SteerRequest's validator): the re-tester's 200
    schemas["SteerRequest"]["properties"]["layers"]["anyOf"].insert(1, {"type": "integer", "minimum": 1})  # 4 as [4]
    for name, first, second in (("ClassifyRequest", "input", "messages"), ("SteerRequest", "prompt", "messages")):
        _exactly_one(schemas[name], first, second)
    _retry_after(document)
    return document


def _exactly_one(schema: dict[str, Any], first: str, second: str) -> None:
    """Say in ``schema`` what :func:`~herald_service.api.schemas.exactly_one` checks: one of the two properties is
    given and not null (a null one counts as not given)."""
    for name in (first, second):
        if name not in schema["properties"]:
            raise KeyError(f"{name} is not a property of the schema")
    schema["oneOf"] = [{"required": [name], "properties": {name: {"not": {"type": "null"}}}} for name in (first, second)]


RETRY_AFTER = {"Retry-After": {"description": "Seconds to wait before trying again: sent with every 429 (queue full,"
                                              " or the wait behind the work ahead too long) and with a 503 while the"
                                              " model loads or while the server holds its most connections"
                                              " (HERALD_MAX_CONNECTIONS); not with the 503 of a dead worker",
                               "schema": {"type": "integer", "minimum": 1}}}
"""The ``Retry-After`` header of :func:`~herald_service.api.errors.error_response` (``QueueFull``, ``NotReady``) and
of the connection bound's 503 (:func:`~herald_service.api.http_protocol.layer_answer`)."""


def _retry_after(document: dict[str, Any]) -> None:
    """Declare :data:`RETRY_AFTER` on every 429 and 503 answer of the document's operations."""
    for operations in document["paths"].values():
        for operation in operations.values():
            for status in ("429", "503"):
                if status in operation.get("responses", {}):
                    operation["responses"][status]["headers"] = RETRY_AFTER


def with_configured_keys(document: dict[str, Any], keyed_paths: set[str]) -> dict[str, Any]:
    """``document`` with the bearer schemes (``HTTPBearer``: the client keys; ``SteerKey``: /steer's) required only by
    the operations of ``keyed_paths`` (those whose keys are set), and each scheme no operation requires left out; in
    place, returned for chaining."""
    used: set[str] = set()
    for path, operations in document["paths"].items():
        for operation in operations.values():
            if "security" in operation and path not in keyed_paths:
                del operation["security"]
            used.update(name for requirement in operation.get("security", []) for name in requirement)
    components = document.get("components", {})
    schemes = {name: scheme for name, scheme in components.get("securitySchemes", {}).items() if name in used}
    if schemes:
        components["securitySchemes"] = schemes
    else:
        components.pop("securitySchemes", None)
    return document


def limited_openapi(app: FastAPI, settings: Settings, keyed_paths: set[str]) -> Callable[[], dict[str, Any]]:
    """A replacement for ``app.openapi`` (FastAPI's documented way to extend the generated document) that writes the
    limits of ``settings`` and the keys of ``keyed_paths`` (paths that ask for an API key on this server) in once,
    when the document is first asked for."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = with_configured_keys(with_request_limits(generate(), settings), keyed_paths)
        return app.openapi_schema

    return openapi
