"""What every ``herald`` command does alike, written once for the command modules: the format of its log lines, the
command line it records in the files it writes, and the help of ``--cache-dir``."""

from __future__ import annotations

import shlex
import sys


CACHE_DIR_HELP = ("Converted backbones and extracted states (default: HERALD_CACHE_DIR, as herald serve reads it, else"
                  " $XDG_CACHE_HOME/herald or ~/.cache/herald).")


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""Every log line of a ``herald`` command, uvicorn's included under ``herald serve``."""


def invoked_command() -> str:
    """The command line as typed, spelled ``herald ...`` however it was started (``python -m herald_service``), for
    the manifests and results files that record it."""
    return shlex.join(["herald", *sys.argv[1:]])
