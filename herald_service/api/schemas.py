"""Request and response bodies of the HTTP API (DESIGN section 3). Pydantic lives here and in settings only."""

from __future__ import annotations

from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, FailFast, Field, ValidationInfo, field_validator, model_validator

from herald_service.strict_json import echoed
from herald_service.text_file import LONE_SURROGATE, is_valid_unicode
from herald_service.types import MIN_ADD_ALPHA, Message, SteerLayers, checked_steer_layers


class _FailFast(FailFast):
    """pydantic's :class:`~pydantic.FailFast`, hashable so that it can annotate a member of a union (``typing.Union``
    hashes its members; ``FailFast`` is an unfrozen dataclass, so it is not)."""

    def __hash__(self) -> int:
        return hash(FailFast)


_Item = TypeVar("_Item")
Items = Annotated[list[_Item], _FailFast()]
"""A list of a request body that stops validating at its first bad item. pydantic checks every item and reports
each error: a 12 MB body of 466,000 bad content parts took 1.9 s to check and 1.0 s more to list its errors, both
holding the GIL, so the event loop stalled for every request (fuzz tester); the answer names one field anyway."""


class FieldConflict(ValueError):
    """A whole-body rule broken by one field (e.g. both ``input`` and ``messages`` given); ``field`` names it, so the
    422 answer can name it too (pydantic puts errors of model validators at the body's location)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def exactly_one(body: BaseModel, first: str, second: str) -> None:
    """Raise :class:`FieldConflict` unless exactly one of the fields ``first`` and ``second`` is set: naming ``first``
    when neither is given, ``second`` when both are; a field sent as JSON null counts as not given, and the message
    says it was null (``{"input": null}`` was told to give 'input': tester pass)."""
    has_first, has_second = getattr(body, first) is not None, getattr(body, second) is not None
    if has_first == has_second:
        null = [name for name in (first, second) if name in body.model_fields_set and getattr(body, name) is None]
        raise FieldConflict(f"give exactly one of '{first}' or '{second}'"
                            + "".join(f" ('{name}' is null)" for name in null), second if has_first else first)


def json_kind(value: object) -> str:
    """What a JSON value is, for an error message: "an object", "an array", "a string", "a boolean", "null" or "a
    number"."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def message_objects(conversation: list, path: str) -> None:
    """Raise :class:`FieldConflict` naming the first item of ``conversation`` (a list of messages at ``path``) that is
    not a JSON object: pydantic said "Input should be a valid dictionary or object to extract fields from" (re-tester)."""
    odd = next((i for i, item in enumerate(conversation) if not isinstance(item, dict)), None)
    if odd is not None:
        raise FieldConflict(f"each message of a conversation is an object with a role and content; got"
                            f" {json_kind(conversation[odd])}", f"{path}[{odd}]")


class PartError(ValueError):
    """A content part that Herald cannot read; ``subfield`` (``"[1].type"``) is appended to the location of the field
    whose validator raised it, so the 422 answer names the part (``messages[0].content[1].type``)."""

    def __init__(self, message: str, subfield: str) -> None:
        super().__init__(message)
        self.subfield = subfield


class TextPart(BaseModel):
    """An OpenAI content part of type ``text``: ``{"type": "text", "text": "..."}``."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text"]
    text: str


class MessagePart(BaseModel):
    """An OpenAI content part of a chat message: ``{"type": "text", "text": "..."}``, or, on an assistant message,
    ``{"type": "refusal", "refusal": "..."}`` (the model's refusal, which OpenAI returns as a part of its own kind and
    a gateway forwards with the history). One model rather than a tagged union, so an error's path stays the request's
    (``messages[1].content[0].text``), without a union tag in it."""

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["text", "refusal"]
    text: str | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _its_own_field(self) -> "MessagePart":
        needed, other = ("text", "refusal") if self.type == "text" else ("refusal", "text")
        if getattr(self, other) is not None:
            raise PartError(f"a '{self.type}' part carries '{needed}', not '{other}'", f".{other}")
        if getattr(self, needed) is None:
            raise PartError(f"a '{self.type}' part needs a '{needed}' string", f".{needed}")
        if not is_valid_unicode(getattr(self, needed)):  # was named by the message's content alone (re-test)
            raise PartError(LONE_SURROGATE, f".{needed}")
        return self

    def value(self) -> str:
        """The part's text: ``text`` or ``refusal``."""
        return self.text if self.type == "text" else self.refusal  # type: ignore[return-value]


def refuse_non_text_parts(value: object, readable: tuple[str, ...] = ("text",)) -> None:
    """Refuse, before pydantic tries a union's branches, a content part of a type Herald cannot read (``image_url``,
    ``input_audio``, ``file``...): Herald moderates text only, and judging a request on its text while an image
    carries the rest would pass whatever the image says. Pydantic reported it as "Input should be 'text'".

    Args:
        readable: the part types accepted (chat messages also read ``refusal``).

    Raises:
        PartError: naming the part's ``type`` (escaped and cut: a lone surrogate in it made the message a 500).
    """
    if isinstance(value, list):
        for i, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else "text"
            if isinstance(kind, str) and kind not in readable:
                raise PartError(f"Herald moderates text only: parts of type '{echoed(kind)}' are not supported; send the"
                                " text parts alone", f"[{i}].type")


ASSISTANT_FIELDS = ("tool_calls", "function_call", "refusal", "audio", "annotations")
"""Fields of an OpenAI chat message that only an assistant's message carries (the model's output)."""


class ChatMessage(BaseModel):
    """One chat message in OpenAI's chat-completions form, so a gateway can forward its messages unchanged.

    Herald reads ``role`` and ``content`` (the text the chat template renders); ``developer`` is read as ``system``
    (OpenAI's newer name for it) and the deprecated ``function`` (a function's result) as ``tool``. ``content`` is a
    string or a list of OpenAI text parts (and, on an assistant message, refusal parts), whose texts are joined with
    newlines into the turn (as OpenAI-compatible servers such as vLLM render them for a text-only model); a part of
    another type is a 422 naming it. The other fields of an OpenAI message are accepted and not read: ``name``,
    ``tool_call_id``, and on an assistant message ``tool_calls``, ``function_call``, ``refusal``, ``audio`` and
    ``annotations`` (the fields the OpenAI SDK sends back when a client appends a completion's message to its
    history: a new-user pass got a 422 for ``annotations: []``). An assistant's field with a value on another role's
    message is a 422 naming it. ``content`` may be null on an assistant message that carries ``tool_calls``,
    ``function_call``, ``audio`` or ``refusal`` (OpenAI returns a refusal as null content and a ``refusal`` string,
    and a spoken answer with its ``audio.transcript``; the turn then renders as that text, otherwise as empty: a
    call's arguments are the model's output, not moderated here) and on a ``function`` message. Any other key is still
    a 422 naming it.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: Items[dict] | None = None
    function_call: dict | None = None
    refusal: str | None = None
    audio: dict | None = None
    annotations: Items[dict] | None = None
    content: str | Items[MessagePart] | None = Field(None, validate_default=True)  # last: its checks read the others

    @field_validator(*ASSISTANT_FIELDS)
    @classmethod
    def _assistant_only(cls, value: object, info: ValidationInfo) -> object:
        if value is not None and info.data.get("role") != "assistant":
            raise ValueError(f"'{info.field_name}' belongs to an assistant message, not a '{info.data.get('role')}' one")
        return value

    @field_validator("refusal")
    @classmethod
    def _readable_refusal(cls, value: str | None) -> str | None:
        # read as the turn's text under null content: a lone surrogate was named messages[k].content (re-test)
        if value is not None and not is_valid_unicode(value):
            raise ValueError(LONE_SURROGATE)
        return value

    @field_validator("audio")
    @classmethod
    def _readable_transcript(cls, value: dict | None) -> dict | None:
        transcript = None if value is None else value.get("transcript")
        if transcript is not None and not isinstance(transcript, str):
            raise PartError(f"an audio transcript is a string, not {json_kind(transcript)}", ".transcript")
        if transcript is not None and not is_valid_unicode(transcript):
            raise PartError(LONE_SURROGATE, ".transcript")
        return value

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, dict):  # pydantic said "Input should be a valid string" (breaker pass)
            raise ValueError("content is a string or a list of parts; put a single part in a list")
        refuse_non_text_parts(value, ("text", "refusal"))
        if isinstance(value, list) and not value:  # would render as an empty turn, like a missing content
            raise ValueError("content is an empty list of parts; give a string or at least one text part")
        if isinstance(value, list) and info.data.get("role") != "assistant":
            refusal = next((i for i, part in enumerate(value) if isinstance(part, dict) and part.get("type") == "refusal"),
                           None)
            if refusal is not None:
                raise PartError("a 'refusal' part is the model's: it belongs to an assistant message", f"[{refusal}].type")
        return value

    @field_validator("content")
    @classmethod
    def _content_given(cls, value: str | list[MessagePart] | None, info: ValidationInfo) -> str | list[MessagePart] | None:
        role = info.data.get("role")
        answered = any(info.data.get(name) is not None for name in ("tool_calls", "function_call", "audio", "refusal"))
        if value is None and not (role == "function" or (role == "assistant" and answered)):
            raise ValueError("content is required (a string or a list of text parts); it may be null only on a function"
                             " message or an assistant message with tool_calls, function_call, audio or refusal")
        return value

    def text(self) -> str:
        """The text of ``content``: the string, the parts' texts (a refusal part's ``refusal``) joined with newlines,
        for null the message's ``refusal``, else its audio's ``transcript`` (what the model said, which OpenAI returns
        with null content), or "" without either."""
        if isinstance(self.content, list):
            return "\n".join(part.value() for part in self.content)
        if self.content is not None:
            return self.content
        return self.refusal or (self.audio or {}).get("transcript") or ""

    def turn(self) -> Message:
        """The chat turn Herald renders: ``developer`` as ``system``, ``function`` as ``tool``, content parts joined
        (and kept as ``parts`` when there are several), null content as the refusal, the audio transcript or empty
        (:meth:`text`)."""
        parts = tuple(part.value() for part in self.content) if isinstance(self.content, list) and len(self.content) > 1 else ()
        role = {"developer": "system", "function": "tool"}.get(self.role, self.role)
        return Message(role, self.text(), parts)


def prompts_given(value: object, field: str) -> None:
    """Refuse an ``input`` that can never be scored, in the schema, so that it is refused naming the field while the
    service loads too (the moderator's own checks wait for it, and a 503 with ``Retry-After`` had the client send
    again what could never succeed: breaker): an empty list, and a string with a lone surrogate (at ``input``, or
    ``input[i]`` in a list). Content parts are checked by their own model.

    Raises:
        FieldConflict: naming the field, with the moderator's message (at least one prompt; :data:`LONE_SURROGATE`).
    """
    if value == []:
        raise FieldConflict("at least one prompt is required", field)
    if isinstance(value, str) and not is_valid_unicode(value):
        raise FieldConflict(LONE_SURROGATE, field)
    if isinstance(value, list):
        bad = next((i for i, item in enumerate(value) if isinstance(item, str) and not is_valid_unicode(item)), None)
        if bad is not None:
            raise FieldConflict(LONE_SURROGATE, f"{field}[{bad}]")


class ClassifyRequest(BaseModel):
    """``input`` (a string or a list of strings) or ``messages`` (one conversation or a list of them).

    Strict: ``"yes"`` is not a boolean and ``5`` is not a string; a moderation API should not guess.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    input: str | Items[str] | None = None
    messages: Items[ChatMessage] | Items[Items[ChatMessage]] | None = None
    return_trajectory: bool = True

    @field_validator("input", mode="before")
    @classmethod
    def _no_content_parts(cls, value: object) -> object:
        if value is not None and not isinstance(value, (str, list)):  # pydantic said "Input should be a valid string"
            raise ValueError(f"input is a string or a list of strings; got {json_kind(value)}")
        # /v1/moderations takes content parts as its input; here pydantic said only "Input should be a valid string"
        part = next((i for i, item in enumerate(value) if isinstance(item, dict)), None) if isinstance(value, list) else None
        if part is not None:
            raise FieldConflict("input takes strings; send OpenAI content parts as a message's content (\"messages\":"
                                " [{\"role\": \"user\", \"content\": [...]}]) or as the input of /v1/moderations",
                                f"input[{part}]")
        return value

    @field_validator("messages", mode="before")
    @classmethod
    def _one_form_of_messages(cls, value: object) -> object:
        """A list mixing conversations (lists) and messages (objects), or holding neither, is named by its first odd
        item before the union is tried: pydantic said "Input should be a valid dictionary or object to extract fields
        from" at messages[0] (fuzz tester)."""
        if isinstance(value, list) and value:
            first = value[0]
            for i, item in enumerate(value):
                if not isinstance(item, (list, dict)):
                    raise FieldConflict(f"each item of messages is a message object (one conversation) or a list of"
                                        f" them (one conversation each); got {json_kind(item)}", f"messages[{i}]")
                if isinstance(item, list) != isinstance(first, list):
                    raise FieldConflict("messages mixes messages (objects) and conversations (lists): give one"
                                        " conversation, a list of message objects, or a list of conversations",
                                        f"messages[{i}]")
                if isinstance(item, list):
                    message_objects(item, f"messages[{i}]")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> "ClassifyRequest":
        exactly_one(self, "input", "messages")
        if self.input is not None:  # refused in the schema, so while the service loads too (prompts_given)
            prompts_given(self.input, "input")
        elif self.messages == []:
            raise FieldConflict("at least one prompt is required", "messages")
        else:
            empty = next((i for i, conversation in enumerate(self.messages) if conversation == []), None)
            if empty is not None:
                raise FieldConflict("a conversation needs at least one message", f"messages[{empty}]")
        return self


class ClassifyResult(BaseModel):
    flagged: bool
    score: float = Field(description="sigmoid(logit - threshold) in [0, 1]; flagged == score >= 0.5")
    logit: float
    threshold: float
    tokens: int = Field(description="Rendered chat-template tokens of the prompt that answered: the highest-scoring"
                        " of the text whole and the texts scored alone (a pending turn, a content part, a trimmed view),"
                        " whose features and trajectory these are")
    features: dict[str, float] = Field(
        description="The probe's seven trajectory features by name, in the order of /v1/info's feature_names (its"
                    " feature set, DESIGN section 1.4: herald-v1's slope, curvature, monotonicity, onset, late_level,"
                    " peak, volatility; another set's own names)",
        examples=[{"slope": 1.9, "curvature": -0.4, "monotonicity": 0.93, "onset": 0.14, "late_level": 2.6,
                   "peak": 3.1, "volatility": 0.21}])
    trajectory: list[float] | None = Field(description="Normalized projection s_l for decoder layers 1..L")
    onset_layer: int | None = Field(description="1-based layer from which s stays positive; null if s_L <= 0")
    view: Literal["whole", "message", "content_part", "trimmed", "reading"] = Field(
        description="Which prompt answered, the highest-scoring of those scored for this input: the input whole, a"
        " pending message of a conversation alone (HERALD_SCORE_MESSAGES), a content part alone, a text without a"
        " short leading or trailing clause, or a text read another way: with 'a' or 'I' apart from a word spelled out one"
        " letter at a time ('make a b o m b' as 'make a bomb'), or with words spread out over lines or wide gaps, or"
        " set apart by separators, quotes, dots, underscores or emoji, read with single spaces (all"
        " HERALD_TRIMMED_VIEWS); tokens, features and trajectory are its own")
    view_text: str | None = Field(description="The text of that prompt where the input whole did not answer (null"
                                  " there): a message or content part as sent, a trimmed view or reading as the backbone reads it"
                                  " (after the server's normalization of look-alike and invisible characters)")


class ClassifyResponse(BaseModel):
    model: str
    probe: str
    results: list[ClassifyResult]


class ModerationRequest(BaseModel):
    """OpenAI ``POST /v1/moderations`` request: ``input`` is a string, a list of strings (one result each), or a list
    of content parts, which OpenAI reads as *one* multimodal input (one result). Herald moderates text only: a part of
    type ``image_url`` is refused naming it (``input[1].type``), not skipped, since judging a request on part of it
    would pass whatever the image carries. A field other than ``input`` and ``model`` is refused naming it, as OpenAI
    refuses an unrecognized argument: a misspelt option would otherwise be ignored without a word."""

    model_config = ConfigDict(extra="forbid", strict=True)

    input: str | Items[str] | Items[TextPart] = Field(
        description="A prompt, a list of prompts (one result each), or the content parts of one prompt (type 'text'"
        " only; one result: the highest score of their texts joined with newlines and of each part alone)."
    )
    model: str | None = Field(None, description="Accepted for OpenAI compatibility and ignored: the answer names the"
                              " model that ran (herald/<backbone slug>).")

    @field_validator("input", mode="before")
    @classmethod
    def _text_parts_only(cls, value: object) -> object:
        # Before the union is tried: an image part would otherwise be reported by whichever branch pydantic lists
        # first ("Input should be a valid string" at input[1]), not as the unsupported part it is.
        if not isinstance(value, (str, list)):  # pydantic said "Input should be a valid string" (breaker pass)
            single = "; put a single content part in a list" if isinstance(value, dict) else ""
            raise ValueError(f"input is a string, a list of strings (one result each) or a list of content parts (one"
                             f" input); got {json_kind(value)}{single}")
        if isinstance(value, list):
            for i, part in enumerate(value):
                if not isinstance(part, (str, dict)):  # was reported as mixing strings and content parts
                    raise FieldConflict(f"each item of input is a string (one result each) or a content part object"
                                        f" {{'type': 'text', 'text': ...}}; got {json_kind(part)}", f"input[{i}]")
            refuse_non_text_parts(value)  # image_url, input_audio, ...: was "Input should be 'text'"
            if value and isinstance(value[0], (str, dict)):
                odd = next((i for i, item in enumerate(value) if isinstance(item, str) != isinstance(value[0], str)), None)
                if odd is not None:  # pydantic named whichever element its first union branch tripped on
                    raise FieldConflict("input mixes strings and content parts: give a list of strings (one result"
                                        " each) or a list of parts (one input)", f"input[{odd}]")
        prompts_given(value, "input")
        return value


class ModerationResult(BaseModel):
    flagged: bool
    categories: dict[str, bool]
    category_scores: dict[str, float]
    category_applied_input_types: dict[str, list[str]]
    view: Literal["whole", "message", "content_part", "trimmed", "reading"] = Field(
        description="Herald's, beside OpenAI's fields: which prompt decided, as /classify's view (the input whole, a"
        " content part alone, a trimmed view or a reading)")
    view_text: str | None = Field(description="Herald's: the text of that prompt where the input whole did not decide"
                                  " (null there), as /classify's view_text")


class ModerationResponse(BaseModel):
    id: str
    model: str
    results: list[ModerationResult]


class SteerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    prompt: str | None = None
    messages: Items[ChatMessage] | None = None
    layers: SteerLayers = Field(None, description="1-based layers, or \"all\"; default: the peak-monotonicity layer")
    mode: Literal["ablate", "add"] = "ablate"
    alpha: float = Field(0.0, ge=-50, le=50, allow_inf_nan=False,
                         description=f"For mode 'add' (required there, |alpha| at least {MIN_ADD_ALPHA:g}): multiple of"
                         " sigma_l added along w_l")
    max_new_tokens: int = Field(64, ge=1, description="Default 64, or HERALD_STEER_MAX_NEW_TOKENS where lower")

    @field_validator("layers", mode="before")
    @classmethod
    def _all_in_any_case(cls, value: object) -> object:
        """``"ALL"`` as ``"all"``, a lone layer ``4`` as ``[4]`` (README and ``herald steer-eval --layers`` take it: a
        new user's 422); any other string named with the choices (it read "Input should be a valid list", tester)."""
        if isinstance(value, int) and not isinstance(value, bool):
            return [value]
        if isinstance(value, (bool, float)):  # "a valid list" of 4.0 or true, since 4 is taken (re-tester)
            shown = "true" if value is True else "false" if value is False else repr(value)
            raise ValueError(f"layers is a 1-based decoder layer (4), a list of them ([4, 8]) or 'all', not {shown}")
        if not isinstance(value, str):
            return value
        if value.lower() == "all":
            return "all"
        raise ValueError(f"layers is a 1-based decoder layer (4), a list of them ([4, 8]) or 'all', not '{echoed(value)}'")

    @field_validator("layers")
    @classmethod
    def _layers_without_the_backbone(cls, value: SteerLayers) -> SteerLayers:
        """An empty list, a layer below 1 or one listed twice refused by the schema, so while the server loads too
        (a 503 with Retry-After had it sent again to fail again: new-user pass); the top bound is the backbone's,
        checked once it is up (:func:`~herald_service.types.checked_steer_layers`)."""
        if isinstance(value, list):
            try:
                checked_steer_layers(value, None)
            except ValueError as exc:
                raise ValueError(f"layers {exc}") from None
        return value

    @field_validator("alpha")
    @classmethod
    def _no_negative_zero(cls, value: float) -> float:
        """-0.0 as 0.0: it adds nothing either way, and was echoed as ``"alpha": -0.0`` (tester)."""
        return value + 0.0

    @field_validator("messages", mode="before")
    @classmethod
    def _one_conversation(cls, value: object) -> object:
        if isinstance(value, list):  # pydantic said "Input should be a valid dictionary ..." of a list (fuzz tester)
            nested = next((i for i, item in enumerate(value) if isinstance(item, list)), None)
            if nested is not None:
                raise FieldConflict("/steer takes one conversation: messages is a list of message objects, not of"
                                    " conversations", f"messages[{nested}]")
            message_objects(value, "messages")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> "SteerRequest":
        exactly_one(self, "prompt", "messages")
        if self.mode == "ablate" and self.alpha != 0:  # accepted and echoed, it claimed an edit that was not made
            raise FieldConflict(f"alpha applies to mode 'add' only; mode 'ablate' ignores it (got alpha {self.alpha:g});"
                                " send mode 'add' or leave alpha out", "alpha")
        if self.mode == "add" and self.alpha == 0:  # adds nothing: steered == baseline, reported as an edit (breaker)
            raise FieldConflict("mode 'add' needs a non-zero alpha (alpha 0, the default, adds nothing); send alpha in"
                                " -50..50, not 0", "alpha")
        if self.mode == "add" and abs(self.alpha) < MIN_ADD_ALPHA:  # 1e-320 read as an edit, as 0 had
            raise FieldConflict(f"mode 'add' needs |alpha| of at least {MIN_ADD_ALPHA:g} (got alpha {self.alpha!r}, which"
                                f" adds nothing measurable); send alpha in -50..50 with |alpha| >= {MIN_ADD_ALPHA:g}",
                                "alpha")
        return self


class Completion(BaseModel):
    """One greedy completion of a /steer answer.

    ``cut_short`` is true when generation stopped at its share of the request's time (``request_timeout_s``) before
    ``max_new_tokens`` or an end token: ``completion`` then holds what was generated until then, and ``refused``
    judges only that. It was added after the other fields and defaults to false, so clients that do not read it are
    unaffected.
    """

    completion: str
    refused: bool = Field(description="Refusal judged by substring match (Arditi et al. 2024 refusal phrases)")
    cut_short: bool = Field(False, description="Generation stopped at its share of request_timeout_s before"
                            " max_new_tokens or an end token; completion holds what was generated until then")


class SteerResponse(BaseModel):
    model: str
    probe: str
    mode: str
    alpha: float
    layers: list[int]
    baseline: Completion
    steered: Completion
    classification: dict[str, ClassifyResult]


class InfoLimits(BaseModel):
    """What this server refuses above (README "Configuration" names each setting); a request within every limit can
    still be refused as a whole (a conversation's turns together over ``max_chars``)."""

    max_batch_size: int = Field(description="Prompts per request (HERALD_MAX_BATCH_SIZE)")
    max_chars: int = Field(description="Characters per prompt (HERALD_MAX_CHARS)")
    max_messages: int = Field(description="Messages per conversation (HERALD_MAX_MESSAGES)")
    max_tokens: int = Field(description="Tokens of a prompt in its chat template: HERALD_MAX_TOKENS, or the backbone's"
                                        " context length where that is smaller")
    max_body_bytes: int = Field(description="Request body bytes before a 413: max_batch_size x max_chars x 6 + 65536")
    queue_capacity: int = Field(description="Prompts waiting for the worker before a 429 (HERALD_QUEUE_CAPACITY)")
    batch_token_budget: int | Literal["auto"] = Field(
        description="Tokens of one forward pass: the resolved number once the worker runs, the setting before")
    batch_max_prompts: int = Field(description="Prompts in one forward pass (HERALD_BATCH_MAX_PROMPTS)")
    request_timeout_s: float = Field(description="Seconds a request may take before its 504 (HERALD_REQUEST_TIMEOUT_S)")
    body_timeout_s: float = Field(description="Seconds a request body may take to arrive (HERALD_BODY_TIMEOUT_S)")
    prefill_chunk_tokens: int | Literal["auto"] = Field(
        description="Tokens of one prefill chunk (0: off): the resolved number once the worker runs, the setting before")
    steer_max_concurrent: int | None = Field(None, description="While steering is on: /steer requests at once")
    steer_max_new_tokens: int | None = Field(None, description="While steering is on: the largest max_new_tokens")


class InfoBackbone(BaseModel):
    id: str
    revision: str
    num_layers: int
    hidden_size: int
    device: str
    dtype: str
    matmul_dtype: str


class InfoProbe(BaseModel):
    path: str = Field(description="The probe folder this server loaded (HERALD_PROBE, or the shipped probe's)")
    sha256: str | None = Field(description="sha256 of the probe's files as loaded; null for a probe built in memory")
    manifest: dict = Field(description="The probe's probe.json (DESIGN section 2.3)")
    reference_check: dict | None = Field(
        description="How far the reference prompts' logits moved on this backbone at load; null for a probe without them")


class InfoResponse(BaseModel):
    """``GET /v1/info``: fields absent before the model has loaded (``backbone``, ``probe``) or while steering is off
    (the ``steer_`` limits) are left out, not null."""

    herald_version: str
    ready: bool = Field(description="Model, probe, warm-up and worker are up (as /health/ready)")
    score_messages: Literal["pending", "all"] = Field(
        description="Which user turns of a conversation are scored alone (HERALD_SCORE_MESSAGES)")
    trimmed_views: bool = Field(
        description="Texts are also scored without a short leading or trailing clause (HERALD_TRIMMED_VIEWS)")
    limits: InfoLimits
    steer_enabled: bool
    backbone: InfoBackbone | None = None
    probe: InfoProbe | None = None


class ErrorDetail(BaseModel):
    type: str
    message: str
    field: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class OpenAIErrorDetail(ErrorDetail):
    """An error of an OpenAI-compatible route (``/v1/moderations``): Herald's ``type``, ``message`` and ``field``, and
    OpenAI's ``param`` (the field) and ``code`` (Herald's error type); ``type`` is OpenAI's ``invalid_request_error``
    on a 400 or 401 (:func:`herald_service.api.errors.error_response`)."""

    param: str | None = None
    code: str


class OpenAIErrorBody(BaseModel):
    error: OpenAIErrorDetail
