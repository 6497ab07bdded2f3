"""The HTTP request a piece of work belongs to, for log lines written away from the request's own code.

:class:`~herald_service.api.middleware.RequestMetrics` sets :data:`CURRENT_REQUEST_ID` for the life of each request
(the ``X-Request-ID`` it answers with); code running in that request's context reads it, e.g. the engine when it
queues a ``/steer`` job, so that the worker thread's error line names the request an operator sees in the access
log. Neutral ground: the engine must not import the API layer (DESIGN section 4; tests/test_layering.py).
"""

from __future__ import annotations

from contextvars import ContextVar

CURRENT_REQUEST_ID: ContextVar[str | None] = ContextVar("herald_request_id", default=None)
"""The current request's id (ASCII, as sent in ``X-Request-ID``); None outside a request (local commands, tests)."""
