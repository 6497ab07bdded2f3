"""SIGINT and SIGTERM while a ``herald`` command starts: the process ends at once, with one line on stderr and the
status a shell expects (130 for Ctrl+C; 0 for a SIGTERM to ``herald serve``, as after a drain), instead of an
exception raised into whatever module is importing.

Python's own SIGINT handler raises KeyboardInterrupt at the next bytecode, and the entry's former SIGTERM handler
raised SystemExit there; during the imports that can be inside a C extension's initialisation, which does not pass it
on as it came. Found by sending the signal as each module of ``herald serve``'s start began to import, and by sending
it at random moments of a real start (2 cores, SmolLM2-135M): pydantic-core's Rust init imports ``datetime`` and turned
the interrupt into ``pyo3_runtime.PanicException`` (a traceback, status 1, for SIGINT and SIGTERM alike); torch's
pybind11 init runs code through ``PyRun_String``, which marks the interrupt unhandled for good, so the interpreter
killed itself with SIGINT at exit (status -2 where ``except KeyboardInterrupt`` had chosen 130); one start aborted
(status -6). Nothing is written or loading until the command has started (``herald serve``: until its server runs),
so ending the process in the handler loses nothing; :func:`hand_over` gives SIGINT back to Python's KeyboardInterrupt
once the command runs, for the commands' own Ctrl+C handling (a fit's state cache, serve's wait for a load under way).

This module imports only ``os`` and ``_signal``, which the interpreter has loaded before any of Herald's code runs:
the entry (:mod:`herald_service.__main__`) installs its handlers before the command's modules import (about 0.4 s
for the CLI, 3 s with torch). Before Herald's first line, some 10 ms into a start (25 ms with the development
install's ``pip install -e``, whose import finder the interpreter's ``site`` loads), the interpreter is still
starting: a SIGINT there is Python's, which prints a traceback of its own start (README, "Configuration").
"""

import os

# _signal, the C module under the standard library's `signal`: `signal` imports enum (and operator, functools ...),
# 4 ms on the dev VM, during which a Ctrl+C printed a traceback of those imports (a console-script start printed one
# for a SIGINT 6-16 ms in; 6-10 ms without them). Handlers set here are what signal.getsignal returns.
import _signal

STOPPED = {_signal.SIGINT: ("SIGINT (Ctrl+C)", 130), _signal.SIGTERM: ("SIGTERM", 0)}
"""The name a line gives each signal, and the exit status: 130 for Ctrl+C (128 + SIGINT), as a shell expects and as
every ``herald`` command exits on Ctrl+C later; 0 for SIGTERM, which ``herald serve`` exits with after a drain too (a
status 143 read as a failure to Kubernetes and systemd)."""

HANDS_OVER_ITSELF = frozenset({"serve", "fit", "eval", "recipes", "classify", "plot", "reference", "steer-eval"})
"""The commands that call :func:`hand_over` themselves, once torch has imported (``herald serve``: just before its
server runs); the entry hands over for the others once the command line's modules have imported. Torch imports after
the command line has checked its options, and a SIGINT during that import, raised as KeyboardInterrupt, ended
``herald fit`` killed by SIGINT (status -2, not 130) 6 times in 40 at 0.9-2 s in (re-tester), as ``herald serve``
did before its handlers (above)."""

_command = ""
"""The command starting (``"serve"``, ``""`` for another), for :func:`_end_now`'s line."""


def _end_now(signum: int, frame: object) -> None:
    name, status = STOPPED[signum]
    what = ("herald serve: {} before the server started; nothing was loading, exiting" if _command == "serve"
            else "herald: {} before the command started; nothing was done, exiting")
    # os.write, not print: the handler may interrupt a write to sys.stderr, and the buffered stream refuses a
    # reentrant call (RuntimeError, with a traceback)
    os.write(2, (what.format(name) + "\n").encode())
    os._exit(status)


def stop_at_once(command: str) -> None:
    """End the process at once (:func:`_end_now`) on SIGINT, and for ``herald serve`` on SIGTERM too, until
    :func:`hand_over`. A SIGINT the parent process set to be ignored (a job a script started with ``&``) stays ignored;
    SIGTERM to another command keeps its default action.

    Args:
        command: the command line's first word (``"serve"``, ``"fit"``, or anything else).
    """
    global _command
    _command = "serve" if command == "serve" else ""
    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _end_now)
    if _command == "serve":
        _signal.signal(_signal.SIGTERM, _end_now)


def hand_over() -> None:
    """Give SIGINT back to Python's KeyboardInterrupt if :func:`stop_at_once` holds it (a process that did not start
    through the entry, such as a test calling the command in-process, keeps its own handler). ``herald serve`` calls
    it just before its server runs, having given SIGTERM a handler of its own; the other commands of
    :data:`HANDS_OVER_ITSELF` once torch has imported, and the entry for the rest once their modules have imported."""
    if _signal.getsignal(_signal.SIGINT) is _end_now:
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)
