"""Evaluation protocols as index sets: random split, leave-one-source-out folds, learning-curve draws.

All protocols start from the same stratified random split (``corpus.stratified_split``, the one ``herald fit`` uses),
so a row in its test part is never trained on by any protocol.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Fold:
    """One leave-one-source-out fold.

    Attributes:
        source: the held-out source S.
        train_index: rows used for fitting and calibration: the random split's train part minus every row of S.
        held_out_index: every row of S (train and test part alike): scored for recall / false-positive rate.
        contrast_index: test-part rows of other sources whose label S lacks, so the fold's AUROC is defined
            (S's rows against unseen rows of the other class). Empty when S has both labels.
    """

    source: str
    train_index: np.ndarray
    held_out_index: np.ndarray
    contrast_index: np.ndarray

    @property
    def test_index(self) -> np.ndarray:
        return np.concatenate([self.held_out_index, self.contrast_index])


def loso_folds(sources: np.ndarray, labels: np.ndarray, train_index: np.ndarray, test_index: np.ndarray) -> list[Fold]:
    """One fold per source, in sorted source order.

    Args:
        sources: ``(n,)`` source of each row.
        labels: ``(n,)`` 1 = harmful.
        train_index, test_index: the random split.
    """
    sources = np.asarray(sources)
    labels = np.asarray(labels)
    folds = []
    for source in sorted(set(sources.tolist())):
        in_s = sources == source
        train = np.array([i for i in train_index if not in_s[i]], dtype=int)
        held = np.nonzero(in_s)[0]
        present = set(labels[held].tolist())
        missing = {0, 1} - present
        contrast = np.array([i for i in test_index if not in_s[i] and labels[i] in missing], dtype=int)
        folds.append(Fold(source, train, held, contrast))
    return folds


def class_sample(labels: np.ndarray, pool: np.ndarray, per_class: int, seed: int) -> np.ndarray:
    """Up to ``per_class`` rows of each label drawn without replacement from ``pool``; sorted indices."""
    rng = np.random.default_rng(seed)
    picks = []
    for value in (0, 1):
        members = pool[labels[pool] == value]
        picks.append(rng.permutation(members)[:per_class])
    return np.sort(np.concatenate(picks))
