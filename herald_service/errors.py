"""Domain errors. One table in ``api/errors.py`` maps each to an HTTP status and one error body."""

from __future__ import annotations


class HeraldError(Exception):
    """Base class. ``field`` names the request field at fault, when there is one; ``prompt_index`` the prompt of a
    batch at fault, for code that knows prompts but not request fields (the backbone), so the caller can name it."""

    error_type = "internal_error"

    def __init__(self, message: str, field: str | None = None, prompt_index: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.prompt_index = prompt_index


class InvalidInput(HeraldError):
    """A request is well-formed JSON but asks for something invalid (HTTP 422)."""

    error_type = "invalid_request"


class InputTooLarge(HeraldError):
    """A request is over a configured limit: batch size, characters or tokens (HTTP 413)."""

    error_type = "input_too_large"


class WorkTooLarge(InputTooLarge):
    """A request whose own estimated model time exceeds ``OWN_WORK_HEADROOM`` of ``request_timeout_s``
    (engine/admission.py), so it would likely time out, even on an idle worker (HTTP 413; ``reason`` is its
    ``herald_rejected_requests_total`` label)."""

    reason = "estimated_work"


class QueueTooSmall(WorkTooLarge):
    """A request that needs more places in the queue than ``queue_capacity`` holds (its prompts with their trimmed
    views and readings), so no wait could admit it (HTTP 413, not a 429 to retry: 64 prompts written one word a line
    need 378 places, and a capacity of 256 answered them 429 with ``Retry-After: 1`` for ever, re-tester)."""

    reason = "queue_capacity"


class QueueFull(HeraldError):
    """The service cannot take the request now (HTTP 429 with ``Retry-After: retry_after_s``, seconds).

    ``reason`` is the ``herald_rejected_requests_total`` label: ``queue_full`` (no queue places left),
    ``estimated_wait`` (the work accepted earlier would keep it past ``request_timeout_s``) or
    ``steer_concurrency`` (``steer_max_concurrent`` /steer requests already run).
    """

    error_type = "overloaded"

    def __init__(self, message: str, retry_after_s: int = 1, reason: str = "queue_full") -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason


class Unauthorized(HeraldError):
    """Missing or wrong API key (HTTP 401)."""

    error_type = "unauthorized"


class FeatureDisabled(HeraldError):
    """The route exists but is switched off in settings (HTTP 404)."""

    error_type = "not_enabled"


class NotReady(HeraldError):
    """Model, probe or worker not up (HTTP 503; with ``Retry-After: retry_after_s`` seconds while loading, when the
    service will be up soon; without it after a failed load or a dead worker)."""

    error_type = "not_ready"

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InferenceFailed(HeraldError):
    """The model failed on a batch; the message is generic, details go to the log (HTTP 500)."""

    error_type = "inference_failed"


class RequestTimeout(HeraldError):
    """The request waited longer than ``request_timeout_s`` (HTTP 504)."""

    error_type = "timeout"


class BackboneError(HeraldError):
    """A backbone cannot be found or loaded (start-up)."""

    error_type = "backbone_error"


class SettingsFileError(HeraldError):
    """A settings file (``.env``) cannot be read as settings: it is not UTF-8 (start-up)."""

    error_type = "settings_error"


class SettingsConflict(HeraldError):
    """Settings that cannot hold together on the loaded backbone's device, found once it is known (start-up): a
    batch token budget below the longest single forward pass with the prefill chunk auto and the device auto."""

    error_type = "settings_error"


class MisspeltSetting(HeraldError):
    """A ``HERALD_*`` name set in the environment or ``.env`` is not a setting but nearly one, or looks like a key
    (``HERALD_API_TOKEN``: :func:`herald_service.config.looks_like_a_key`) (start-up)."""

    error_type = "settings_error"


class ProbeMismatch(HeraldError):
    """A probe artifact does not match the loaded backbone, or is malformed (start-up)."""

    error_type = "probe_mismatch"
