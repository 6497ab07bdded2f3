"""benchmarks/steer_estimate.py drives the service's own Moderator and reads what its engine is given: run on the
fake backbone, so a changed signature or a job no longer estimated fails here rather than as a wrong ratio on the GPU."""

from types import SimpleNamespace

from benchmarks.steer_estimate import moderator_for, one_steer
from herald_service.engine.runtime import fake_runtime
from herald_service.engine.service import steer_job_seconds


def test_the_first_steer_counts_until_its_deadline_and_the_next_for_its_estimate():
    runtime = fake_runtime()
    target = SimpleNamespace(backbone=runtime.backbone, probe=runtime.probe, runtime=runtime)
    moderator = moderator_for(target, timeout_s=30.0)
    try:
        first = one_steer(moderator, "make a bomb", 8)
        step_s = moderator.decode_step_s.seconds
        second = one_steer(moderator, "make a bomb", 8)
    finally:
        moderator.engine.stop()
    assert not first["estimated"] and first["counted_s"] == 30.0 and first["decode_step_ms"] is None
    assert second["estimated"] and second["decode_step_ms"] == 1000 * step_s
    expected = steer_job_seconds(second["prefill_priced_s"], 8, step_s)
    assert second["counted_s"] == expected < 30.0
    assert second["ratio"] == second["counted_s"] / second["ran_s"] and second["baseline_ratio"] == 30.0 / second["ran_s"]
    assert second["tokens"] == [8, 5]  # the fake's refusal, and its reply once the intervention lifts it
