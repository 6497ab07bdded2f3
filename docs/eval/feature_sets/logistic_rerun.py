"""Exploratory rerun (2026-12-07, not a registered study): the five candidate feature sets of docs/eval/feature_sets.md
with the shipped SmolLM2 recipe (logistic directions and written training rows), which came after that study.

The candidates were removed from ``herald_service/probes/features.py`` in c428127; this script reads them from commit
80987ac through ``git show`` (so it needs the repository's history), registers them as ``cand-<set>`` before
``herald_service.training.methods`` builds its method table, and runs ``herald eval`` with every ``herald:<set>``
method fitted with the run's ``--direction-estimator`` (the CLI fits only the ``herald`` method with it otherwise).

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
    import herald_service.training.eval as evaluation
    from herald_service.cli import main
    from herald_service.training.methods import HeraldMethod

    shipped_fit_method = evaluation.fit_method

    def fit_method(name, data, seed, direction_estimator="lda"):
        if not name.startswith("herald:"):
            return shipped_fit_method(name, data, seed, direction_estimator)
        method = HeraldMethod(seed, feature_set=name.split(":", 1)[1], direction_estimator=direction_estimator)
        return method.fit(data.states, data.labels, evaluation.groups_of(data))

    evaluation.fit_method = fit_method
    main(argv)


if __name__ == "__main__":
    run(sys.argv[1:])
