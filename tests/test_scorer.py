"""The 288-parameter scorer and threshold calibration (DESIGN section 1.5)."""

import numpy as np
import pytest
import torch

from herald_service.probes.scorer import TrajectoryScorer, calibrate_threshold, train_scorer


def test_exactly_288_trainable_parameters():
    scorer = TrajectoryScorer()
    assert scorer.num_parameters() == 288
    shapes = {k: tuple(v.shape) for k, v in scorer.state_dict().items()}
    assert shapes == {"mlp.0.weight": (32, 7), "mlp.0.bias": (32,), "mlp.2.weight": (1, 32)}


def test_scorer_learns_a_separable_problem():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 7)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 4] > 0).astype(int)
    scorer = train_scorer(x, y)
    with torch.no_grad():
        logits = scorer(torch.tensor(x)).numpy()
    accuracy = ((logits > 0) == y).mean()
    assert accuracy > 0.95


def test_max_f1_threshold_on_hand_example():
    logits = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0])
    labels = np.array([0, 0, 1, 0, 1, 1])
    # flag >= 1.5: TP 2, FP 0, FN 1 -> F1 0.8; flag >= -0.5: TP 3, FP 1 -> F1 0.857 (the best)
    t = calibrate_threshold(logits, labels)
    assert t == pytest.approx(-0.5)


def test_target_fpr_threshold():
    logits = np.arange(10, dtype=float)
    labels = np.array([0, 0, 0, 0, 0, 1, 0, 1, 1, 1])
    t = calibrate_threshold(logits, labels, "target_fpr", target_fpr=0.0)
    assert t == pytest.approx(6.5)  # the lowest threshold with no benign flagged
    t2 = calibrate_threshold(logits, labels, "target_fpr", target_fpr=1 / 6)
    assert t2 == pytest.approx(4.5)


def test_a_target_fpr_finer_than_the_benign_calibration_rows_can_measure_is_warned_about(caplog):
    # tester finding: 8 benign calibration rows and --target-fpr 0.01 set a threshold for no false positive, silently
    logits = np.arange(10, dtype=float)
    labels = np.array([0, 0, 0, 0, 0, 1, 0, 1, 1, 1])  # 6 benign: one false positive is 16.7%
    with caplog.at_level("WARNING", logger="herald_service.probes.scorer"):
        assert calibrate_threshold(logits, labels, "target_fpr", target_fpr=0.01) == pytest.approx(6.5)
    assert caplog.messages == ["the calibration part holds 6 benign prompts: one false positive among them is 16.7%,"
                               " above the target false-positive rate 1%, so the threshold is set for none; give more"
                               " benign prompts for a threshold at that rate"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="herald_service.probes.scorer"):
        calibrate_threshold(logits, labels, "target_fpr", target_fpr=1 / 6)  # measurable: 1 of 6
        calibrate_threshold(logits, labels, "target_fpr", target_fpr=0.0)  # none asked for
        calibrate_threshold(logits, labels)
    assert caplog.messages == []


def test_calibration_needs_both_classes():
    with pytest.raises(ValueError):
        calibrate_threshold(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="unknown"):
        calibrate_threshold(np.arange(2.0), np.array([0, 1]), method="vibes")


def test_training_runs_on_one_thread_and_restores_the_count():
    from herald_service.probes.scorer import one_intra_op_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), one_intra_op_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("a failed step")
        assert torch.get_num_threads() == 2  # restored after an error too
        x = np.random.default_rng(1).standard_normal((50, 7)).astype(np.float32)
        train_scorer(x, (x[:, 0] > 0).astype(int), epochs=3)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
