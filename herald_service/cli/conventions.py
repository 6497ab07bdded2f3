"""What every ``herald`` command does alike, written once for the command modules: the format of its log lines, the
command line it records in the files it writes, and the help of ``--cache-dir``."""

from __future__ import annotations

import logging
import os
import shlex
import sys
from typing import Annotated, Any

from pydantic import BeforeValidator, TypeAdapter, ValidationError


CACHE_DIR_HELP = ("Converted backbones and extracted states (default: HERALD_CACHE_DIR, as herald serve reads it, else"
                  " $XDG_CACHE_HOME/herald or ~/.cache/herald).")


def _no_count_spelled(value: object) -> object:
    """Read ``none`` or ``all`` (any case, as ``null``) as None, no count: pydantic-settings spells None ``null``, and
    ``--max-per-source none`` got pydantic's bare "unable to parse string as an integer" (a tester finding, session
    46). Any other string that is not an integer is refused saying both forms (``''`` or ``nul`` got the bare integer
    error); the rest goes on to the integer check, whose error names the option.

    Raises:
        ValueError: a string that is neither an integer nor none/all/null (pydantic reports it under the option).
    """
    if isinstance(value, str) and value.strip().lower() in ("none", "all", "null"):
        return None
    if isinstance(value, str):
        try:
            _WHOLE_NUMBER.validate_python(value)
        except ValidationError:  # '' or 'nul' got the bare integer error, which did not say none/all are read too
            raise ValueError("give a whole number of rows, or none (or all) for every row") from None
    return value


_WHOLE_NUMBER = TypeAdapter(int)


CountOrAll = Annotated[int | None, BeforeValidator(_no_count_spelled)]
"""A count option that can also mean every row (``--max-per-source`` of fit, eval and recipes, ``--limit`` of
steer-eval): an integer (its own ``ge``), or null, none or all (any case) for None."""


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""Every log line of a ``herald`` command, uvicorn's included under ``herald serve``."""


def log_formatter(log_format: str = "text") -> logging.Formatter:
    """The formatter of every ``herald`` command's log lines under ``log_format`` (``HERALD_LOG_FORMAT``): ``text``,
    lines in :data:`LOG_FORMAT`; or ``json``, one JSON object a line (python-json-logger's ``JsonFormatter``) with
    ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, a traceback as ``exc_info``, and the fields a line
    was logged with apart (the access log's ``method``, ``route``, ``status``, ``duration_ms``, ``request_id``,
    ``client``: :class:`~herald_service.api.middleware.RequestMetrics`)."""
    if log_format == "text":
        return logging.Formatter(LOG_FORMAT)
    from pythonjsonlogger.core import RESERVED_ATTRS
    from pythonjsonlogger.json import JsonFormatter

    # uvicorn passes its own copy of a message with terminal colour codes as an extra field: dropped
    return JsonFormatter("%(levelname)s %(name)s %(message)s", rename_fields={"levelname": "level", "name": "logger"},
                         timestamp="time", reserved_attrs=[*RESERVED_ATTRS, "color_message"])


def route_library_output(log_format: str) -> None:
    """Under ``json`` (``HERALD_LOG_FORMAT``), keep stderr one JSON object a line: transformers' records go through the
    root logger's handler (:func:`log_formatter`) instead of transformers' own, which wrote ``[transformers] We strongly
    recommend passing in an attention_mask ...`` as plain text (re-tester), and progress bars (tqdm: ``herald
    steer-eval``'s, the weight loading's) are off (``TQDM_DISABLE``); under ``text``, nothing changes."""
    if log_format != "json":
        return
    os.environ["TQDM_DISABLE"] = "1"
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_default_handler()
    transformers_logging.enable_propagation()


def log_config(level: str, log_format: str = "text") -> dict[str, Any]:
    """The ``logging.config.dictConfig`` of ``herald serve``: one stderr handler on the root logger at ``level`` (any
    case), which uvicorn's loggers propagate to, its lines formatted by :func:`log_formatter`. Given to uvicorn as its
    ``log_config``, whose own (``INFO:     Uvicorn running on ...``, colours, no time or logger name) it replaces."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"herald": {"()": log_formatter, "log_format": log_format}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "herald", "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
    }


def invoked_command() -> str:
    """The command line as typed, spelled ``herald ...`` however it was started (``python -m herald_service``), for
    the manifests and results files that record it."""
    return shlex.join(["herald", *sys.argv[1:]])
