"""``python -m herald_service`` is the ``herald`` command."""

from herald_service.cli import main

main()
