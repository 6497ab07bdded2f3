"""Exploratory rerun (2026-12-07, not a registered study): the five candidate feature sets of docs/eval/feature_sets.md
with the shipped SmolLM2 recipe (logistic directions and written training rows), which came after that study.

The candidates were removed from ``herald_service/probes/features.py`` in c428127; this script reads them from commit
80987ac through ``git show`` (so it needs the repository's history), registers them as ``cand-<set>`` before
``herald_service.training.methods`` builds its method table, and runs ``herald eval``, which fits every
``herald:<set>`` with the run's ``--direction-estimator`` (since 31535e7; the run of 2026-12-07 replaced
``fit_method`` here to the same effect).

Usage, from the repository root::

    python docs/eval/feature_sets/logistic_rerun.py eval --direction-estimator logistic ... \\
        --methods '["herald","herald:cand-legendre",...,"logreg_last"]'
"""

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

CANDIDATES_COMMIT = "80987ac"


def load_candidates() -> dict:
    """The ``cand-*`` entries of ``FEATURE_SETS`` at :data:`CANDIDATES_COMMIT`."""
    source = subprocess.run(["git", "show", f"{CANDIDATES_COMMIT}:herald_service/probes/features.py"], check=True,
                            capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "candidate_features.py"
        path.write_text(source)
        spec = importlib.util.spec_from_file_location("candidate_features", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return {name: entry for name, entry in module.FEATURE_SETS.items() if name.startswith("cand-")}


def run(argv: list[str]) -> None:
    import herald_service.probes.features as features

    for name, entry in load_candidates().items():
        features.FEATURE_SETS[name] = features.FeatureSet(entry.name, entry.names, entry.min_layers, entry.compute)
    from herald_service.cli import main  # builds the method table (herald:<set> for every registered set) on import

    main(argv)


if __name__ == "__main__":
    run(sys.argv[1:])
