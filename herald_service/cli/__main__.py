"""``python -m herald_service.cli``: the ``herald`` command line, through the same entry as ``python -m herald_service``
and the console script (:func:`herald_service.__main__.main`). Without this module it failed with "is a package and
cannot be directly executed" (tester nit)."""

from herald_service.__main__ import main

if __name__ == "__main__":
    main()
