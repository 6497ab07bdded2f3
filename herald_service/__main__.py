"""``python -m herald_service`` and the ``herald`` console script: a small entry that acts on a signal before the
command's modules have imported (about 0.4 s for the CLI, 3 s with torch), then runs :func:`herald_service.cli.main`."""

import sys

from herald_service import start_signals


def main() -> None:
    """Run the ``herald`` command line (``sys.argv``).

    Raises:
        SystemExit: as :func:`herald_service.cli.main`. A SIGINT while the command starts (its modules import; for
            ``herald serve``, until its server runs), and a SIGTERM to ``herald serve`` then, end the process at once
            with one line and status 130 or 0 (:mod:`herald_service.start_signals`).
    """
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    start_signals.stop_at_once(command)
    from herald_service.cli import main as run_command

    if command not in start_signals.HANDS_OVER_ITSELF:  # those hand over once torch has imported
        start_signals.hand_over()
    run_command()


if __name__ == "__main__":
    main()
