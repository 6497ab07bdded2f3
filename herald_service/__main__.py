"""``python -m herald_service`` and the ``herald`` console script: a small entry that acts on a signal before the
command's modules have imported (about 0.4 s for the CLI, 3 s with torch), then runs :func:`herald_service.cli.main`."""

import signal
import sys


def _stopped_before_serving(signum: int, frame: object) -> None:
    # `herald serve` installs its own SIGTERM handling when its server starts; a SIGTERM before that (the pod ended
    # during the imports and the probe check: nothing is loading yet) took the default action, status 143, where the
    # README promises 0 (tester)
    print("herald serve: SIGTERM before the server started; nothing was loading, exiting", file=sys.stderr)
    raise SystemExit(0)


def main() -> None:
    """Run the ``herald`` command line (``sys.argv``).

    Raises:
        SystemExit: 130 on Ctrl+C while the command's modules import; 0 on SIGTERM to ``herald serve`` before its
            server starts; else as :func:`herald_service.cli.main`.
    """
    if sys.argv[1:2] == ["serve"]:
        signal.signal(signal.SIGTERM, _stopped_before_serving)
    try:
        from herald_service.cli import main as run_command
    except KeyboardInterrupt:  # Ctrl+C while the command's modules import
        raise SystemExit(130) from None
    run_command()


if __name__ == "__main__":
    main()
