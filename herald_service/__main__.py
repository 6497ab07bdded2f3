"""``python -m herald_service`` is the ``herald`` command."""

try:
    from herald_service.cli import main
except KeyboardInterrupt:  # Ctrl+C while the command's modules import
    raise SystemExit(130) from None

main()
