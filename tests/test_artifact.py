"""Probe artifact: safetensors + JSON round trip, and refusal of a probe from another backbone (DESIGN section 2)."""

import dataclasses
import json
import re

import numpy as np
import pytest

from herald_service.backbone.fake import FakeBackbone, synthetic_corpus
from herald_service.errors import ProbeMismatch
from herald_service.probes.artifact import backbone_manifest, compatibility_warnings, load_probe, save_probe
from herald_service.probes.probe import HeraldProbe
from herald_service.types import user_turn


@pytest.fixture(scope="module")
def fitted():
    backbone = FakeBackbone()
    prompts, labels = synthetic_corpus(60)
    states = backbone.last_token_states(backbone.encode([user_turn(p) for p in prompts])).numpy()
    return backbone, HeraldProbe().fit(states, np.array(labels)).fitted_, states


def test_round_trip_gives_identical_verdicts(tmp_path, fitted):
    backbone, probe, states = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info), "training_data": {"n": len(states)}})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.json", "probe.safetensors"]
    # both files readable as probe.json is (safetensors wrote 0600: another user could not serve the probe)
    assert (tmp_path / "probe.safetensors").stat().st_mode & 0o777 == (tmp_path / "probe.json").stat().st_mode & 0o777
    loaded, manifest = load_probe(tmp_path, backbone.info)
    before, after = probe.predict(states), loaded.predict(states)
    assert np.array_equal(before.flagged, after.flagged)
    assert np.allclose(before.scores, after.scores, atol=1e-6)
    assert manifest["feature_set"] == "herald-v1"
    assert manifest["peak_layer"] == probe.peak_layer
    assert manifest["threshold"] == pytest.approx(probe.threshold)
    assert manifest["directions_bytes"] == backbone.info.num_layers * backbone.info.hidden_size * 2


def test_artifact_has_no_pickle(tmp_path, fitted):
    backbone, probe, _ = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    raw = (tmp_path / "probe.safetensors").read_bytes()
    assert b"\x80\x04\x95" not in raw[:64]  # a pickle protocol-4 header
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    assert header["directions"]["dtype"] == "F16"
    assert header["directions"]["shape"] == [backbone.info.num_layers, backbone.info.hidden_size]


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"num_layers": 9}, "num_layers 8 in probe.json, 9 in the backbone"),
        ({"hidden_size": 32}, "hidden_size 16 in probe.json, 32 in the backbone"),
        ({"config_hash": "0" * 64}, "config hash differs (another architecture or size; or a probe fitted before"
                                    " 2026-12-05 on a GPT-2, GPT-J, GPT-NeoX, BLOOM, Falcon, OPT, StableLM, StarCoder2 or"
                                    " Mixtral model, whose hash then read fewer of its config's keys: fit it again)"),
    ],
)
def test_mismatched_backbone_is_refused(tmp_path, fitted, change, problem):
    backbone, probe, _ = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    advice = ". Give a probe fitted on this backbone (--probe; HERALD_PROBE for herald serve), or fit one with `herald fit`."
    same_id = dataclasses.replace(backbone.info, **change)
    # Breaker: with equal ids this read "probe was fitted on 'X' but the backbone is 'X': num_layers 31 != ...", a
    # contradiction; the file names the loaded backbone and does not match it
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(tmp_path, same_id)
    assert refused.value.message == (f"probe.json names backbone {backbone.info.model_id!r}, the one loaded, but does not"
                                     f" match it: {problem}{advice}")
    other_id = dataclasses.replace(same_id, model_id="org/other-model")
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(tmp_path, other_id)
    assert refused.value.message == (f"probe was fitted on {backbone.info.model_id!r} but the backbone is 'org/other-model':"
                                     f" {problem}{advice}")


def test_another_revision_loads_with_a_warning(tmp_path, fitted):
    # Breaker: a probe whose revision differs from the backbone's was served without a word (another chat template is
    # refused: test_a_probe_fitted_with_another_chat_template_is_refused)
    backbone, probe, _ = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    _, manifest = load_probe(tmp_path, backbone.info)
    assert compatibility_warnings(manifest, backbone.info) == []
    other = dataclasses.replace(backbone.info, revision="gguf-sha256:" + "0" * 64)
    _, manifest = load_probe(tmp_path, other)  # loads: DESIGN 2 refuses only layers, width and config
    (line,) = compatibility_warnings(manifest, other)
    assert line.startswith(f"probe was fitted on weights {backbone.info.revision!r}, the backbone's are 'gguf-sha256:000")


def test_a_probe_fitted_with_another_chat_template_is_refused(tmp_path, fitted):
    # tester findings: a conversion missing chat_template.jinja rendered prompts as raw text and the shipped probe
    # passed a pipe-bomb request at 1e-84; a whitespace-only or content-only template scored every prompt 0; each with
    # only a warning
    from herald_service.probes.artifact import check_chat_template

    backbone, probe, _ = fitted
    templated = dataclasses.replace(backbone.info, chat_template_hash="a" * 64)
    raw = dataclasses.replace(backbone.info, chat_template_hash=None)
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(templated)})
    _, manifest = load_probe(tmp_path, raw)  # the config.json check passes: the template is not in it
    check_chat_template(manifest, templated)
    for other, shown in ((raw, "no chat template: raw text"), (dataclasses.replace(raw, chat_template_hash="b" * 64),
                                                                "chat_template_hash bbbbbbbbbbbb...")):
        with pytest.raises(ProbeMismatch) as refused:
            check_chat_template(manifest, other)
        assert refused.value.field == "probe"
        assert refused.value.message.startswith(
            f"probe was fitted on prompts rendered with chat_template_hash aaaaaaaaaaaa..., but the backbone"
            f" {raw.model_id!r} renders them with {shown}: the probe reads the states")
    save_probe(probe, tmp_path / "raw", {"backbone": backbone_manifest(raw)})  # a base model's probe, on raw text
    _, manifest = load_probe(tmp_path / "raw", raw)
    check_chat_template(manifest, raw)
    with pytest.raises(ProbeMismatch, match="fitted on prompts rendered with no chat template: raw text, but"):
        check_chat_template(manifest, templated)


@pytest.mark.parametrize("rule, warned", [(None, False), ("nfkc-ascii-v5", False), ("nfkc-ascii-v4", True)])
def test_a_probe_fitted_with_another_prompt_text_rule_loads_with_a_warning(tmp_path, fitted, rule, warned):
    # a probe fitted on v4-folded text read whitespace at a message's ends as written; served under v5 it should say
    backbone, probe, _ = fitted
    training = {} if rule is None else {"training_data": {"prompt_text": rule}}
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info), **training})
    _, manifest = load_probe(tmp_path, backbone.info)
    lines = compatibility_warnings(manifest, backbone.info)
    assert lines == (["probe was fitted on prompt text folded by rule 'nfkc-ascii-v4'; this server folds it by"
                      " 'nfkc-ascii-v5' (herald_service/prompt_text.py): prompts the rules read differently may score"
                      " differently; refit with `herald fit`"] if warned else [])


def test_scores_at_the_threshold_limits_are_0_and_1_without_overflow_warnings(fitted):
    # Breaker: a scorer whose logits sat far from the threshold printed "overflow encountered in exp" on every request
    import warnings

    _, probe, states = fitted
    for threshold, expected in ((-1e4, 1.0), (1e4, 0.0)):
        shifted = dataclasses.replace(probe, threshold=threshold)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = shifted.predict(states)
        assert np.all(out.scores == expected) and np.all(out.flagged == (expected == 1.0))


def test_missing_or_corrupt_probe_is_a_clear_error(tmp_path, fitted):
    backbone, probe, _ = fitted
    with pytest.raises(ProbeMismatch, match="probe.json is missing"):
        load_probe(tmp_path / "nowhere", backbone.info)
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    (tmp_path / "probe.json").write_text("{not json")
    with pytest.raises(ProbeMismatch, match=f"^probe file {tmp_path / 'probe.json'} is corrupt or hand-edited: not valid"
                                            r" JSON \(.*\); refit the probe with `herald fit`$"):
        load_probe(tmp_path, backbone.info)


@pytest.mark.parametrize("text, problem", [
    ('"threshold": NaN', "the number at 'threshold' is NaN, which is not JSON (RFC 8259 has no NaN or Infinity)"),
    ('"threshold": -Infinity', "the number at 'threshold' is -Infinity, which is not JSON (RFC 8259 has no NaN or Infinity)"),
    ('"threshold": Infinity', "the number at 'threshold' is Infinity, which is not JSON (RFC 8259 has no NaN or Infinity)"),
    ('"threshold": 1e999', "the number at 'threshold' (1e999) is too large to represent"),
    ('"threshold": 1, "threshold": 2', "key 'threshold' appears twice"),
])
def test_a_manifest_json_cannot_hold_is_named_as_a_corrupt_probe_file(tmp_path, fitted, text, problem):
    # Breaker: a NaN threshold read "... is NaN ...; send a finite number", advice for a request body, not a file;
    # json.loads had read NaN, and a NaN threshold served every prompt as "allowed" with score null
    backbone, manifest = _saved(tmp_path, fitted)
    del manifest["threshold"]
    (tmp_path / "probe.json").write_text(json.dumps(manifest)[:-1] + f", {text}}}")
    for info in (backbone.info, None):  # None: serve's preflight, before the backbone loads
        with pytest.raises(ProbeMismatch) as refused:
            load_probe(tmp_path, info)
        assert refused.value.message.startswith(f"probe file {tmp_path / 'probe.json'} is corrupt or hand-edited: {problem}")
        assert refused.value.message.endswith("refit the probe with `herald fit`")


def test_truncated_or_incomplete_tensors_are_a_clear_error_naming_the_file(tmp_path, fitted):
    from safetensors.numpy import load_file, save_file

    from herald_service.probes.artifact import TENSORS_FILE

    backbone, probe, _ = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    path = tmp_path / TENSORS_FILE
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])  # a copy cut short
    with pytest.raises(ProbeMismatch, match=f"cannot read probe tensors {path}.*HERALD_PROBE"):
        load_probe(tmp_path, backbone.info)
    path.write_bytes(whole)
    tensors = load_file(str(path))
    save_file({k: v for k, v in tensors.items() if not k.startswith("scorer.")}, str(path))
    with pytest.raises(ProbeMismatch, match="no valid 288-parameter scorer"):
        load_probe(tmp_path, backbone.info)
    save_file({k: v for k, v in tensors.items() if k != "scales"}, str(path))
    with pytest.raises(ProbeMismatch, match="lack scales"):
        load_probe(tmp_path, backbone.info)


def test_served_logits_equal_the_torch_scorer(fitted):
    import torch

    _, probe, states = fitted
    features = probe.predict(states).features
    with torch.no_grad():
        reference = probe.scorer(torch.as_tensor(probe.feature_stats.transform(features))).double().numpy()
    assert np.allclose(probe.logits(features), reference, atol=1e-5)


def test_eval_scores_extra_sets_with_a_saved_probe_at_its_own_threshold(tmp_path, fitted):
    from herald_service.training.eval import LabeledStates, score_saved_probe

    backbone, probe, states = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    n = len(states)
    extra = {"set.jsonl": LabeledStates(states, np.zeros(n, int), np.array(["S"] * n), np.full(n, 10))}
    out = score_saved_probe(tmp_path, backbone.info, extra, replicates=20)
    assert out["threshold"] == pytest.approx(probe.threshold)
    flagged = probe.predict(states).flagged
    assert out["sets"]["set.jsonl"]["pooled"]["false_positive_rate"]["value"] == pytest.approx(flagged.mean())
    assert set(out["sets"]["set.jsonl"]["per_source"]) == {"S"}


def test_eval_warns_when_a_jailbreak_augmented_probe_was_fitted_under_another_seed(tmp_path, fitted, caplog):
    from herald_service.training.eval import LabeledStates, score_saved_probe

    backbone, probe, states = fitted
    n = len(states)
    extra = {"jailbreak_wrapped": LabeledStates(states, np.ones(n, int), np.array(["J"] * n), np.full(n, 10))}
    augmented = {"backbone": backbone_manifest(backbone.info), "training_data": {"seed": 1, "jailbreak_augmentation": {"rows": 80}}}
    save_probe(probe, tmp_path / "augmented", augmented)
    out = score_saved_probe(tmp_path / "augmented", backbone.info, extra, replicates=20, seed=0)
    assert out["warning"].startswith("the probe was fitted with jailbreak-wrapped training rows under --seed 1, "
                                     "this evaluation uses --seed 0")
    assert out["warning"] in caplog.text
    assert "warning" not in score_saved_probe(tmp_path / "augmented", backbone.info, extra, replicates=20, seed=1)
    save_probe(probe, tmp_path / "plain", {**augmented, "training_data": {"seed": 1, "jailbreak_augmentation": None}})
    assert "warning" not in score_saved_probe(tmp_path / "plain", backbone.info, extra, replicates=20, seed=0)
    # fitted under another cap: the wrapped requests (rows this run's cap left out) may be its training rows, and their
    # recall read 100% with no word (re-tester)
    capped = {**augmented, "training_data": {"seed": 0, "max_per_source_and_label": None}}
    save_probe(probe, tmp_path / "uncapped", capped)
    out = score_saved_probe(tmp_path / "uncapped", backbone.info, extra, replicates=20, seed=0, max_per_source=20)
    assert out["warning"] == ("the jailbreak-wrapped set wraps AdvBench and HarmBench requests this run's"
                              " --max-per-source 20 (--seed 0) left out, and the probe was fitted with --max-per-source"
                              " null (--seed 0): it may have been trained on some of them, so its jailbreak-wrapped"
                              " recall may be inflated; evaluate with the probe's --max-per-source and --seed")
    assert "warning" not in score_saved_probe(tmp_path / "uncapped", backbone.info, extra, replicates=20, seed=0,
                                              max_per_source=None)


def _saved(tmp_path, fitted):
    backbone, probe, _ = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    return backbone, json.loads((tmp_path / "probe.json").read_text())


@pytest.mark.parametrize("text, message", [
    ('"threshold": 1e308', "threshold must be a finite number within +-10000 (a logit); got 1e+308"),
    # JSON null read "got None" (tester pass)
    ('"threshold": null', "threshold must be a finite number within +-10000 (a logit); got null"),
    ('"threshold": "1.2"', 'threshold must be a finite number within +-10000 (a logit); got "1.2"'),
    ('"format_version": "1"', 'format_version "1" is not supported; need the integer 1'),
    ('"format_version": 2', "format_version 2 is not supported; need the integer 1"),
    ('"format_version": true', "format_version true is not supported; need the integer 1"),
    ('"peak_layer": 99', "peak_layer must be an integer decoder layer in 1..8; got 99"),
    ('"peak_layer": 0', "peak_layer must be an integer decoder layer in 1..8; got 0"),
    ('"peak_layer": 2.7', "peak_layer must be an integer decoder layer in 1..8; got 2.7"),
    ('"threshold_method": 3', "threshold_method must be a non-empty string; got 3"),
    ('"threshold_method": ""', 'threshold_method must be a non-empty string; got ""'),
    ('"target_fpr": 1.5', "target_fpr must be a number between 0 and 1 (a false-positive rate); got 1.5"),
    ('"target_fpr": "0.3"', 'target_fpr must be a number between 0 and 1 (a false-positive rate); got "0.3"'),
    # a max_f1 probe with a target beside it: a hand edit, and which of the two holds is unknown (tester)
    ('"target_fpr": 0.3', "target_fpr must be absent unless threshold_method is target_fpr; got 0.3"),
    ('"backbone": [4]', "backbone must be an object with num_layers and hidden_size; got [4]"),
    ('"backbone": {"num_layers": 8}', "backbone.hidden_size is missing; it must be a positive integer"),
    ('"backbone": {"num_layers": 0, "hidden_size": 16}', "backbone.num_layers must be a positive integer; got 0"),
    # a list or a number crashed the feature-set lookup with a TypeError traceback (second breaker pass)
    ('"feature_set": []', "feature_set must be a string; got []"),
    ('"feature_names": 5', "feature_names 5 do not match feature set 'herald-v1' ['slope', 'curvature',"
                           " 'monotonicity', 'onset', 'late_level', 'peak', 'volatility']"),
    ('"reference": []', "reference must be an object with prompts; got []"),
    ('"reference": {}', "reference.prompts is missing; it must be a list of 1 to 32 objects with text and logit"),
    ('"reference": {"prompts": []}', "reference.prompts must be a list of 1 to 32 objects with text and logit; got []"),
    ('"reference": {"prompts": [7]}', "reference.prompts[0] must be an object with text and logit; got 7"),
    ('"reference": {"prompts": [{"text": " ", "logit": 1}]}',
     'reference.prompts[0].text must be a non-empty string of at most 500 characters of UTF-8 text; got " "'),
    # a lone surrogate passed and the tokenizer refused it with a traceback (tester finding)
    ('"reference": {"prompts": [{"text": "hi \\ud800", "logit": 1}]}',
     'reference.prompts[0].text must be a non-empty string of at most 500 characters of UTF-8 text; got "hi \\ud800"'),
    ('"reference": {"prompts": [' + ", ".join(['{"text": "hi", "logit": 1}'] * 33) + ']}',
     'reference.prompts must be a list of 1 to 32 objects with text and logit; got [{"text": "hi", "logit": 1},'
     ' {"text": "hi", "logit": 1}, ...'),
    ('"reference": {"prompts": [{"text": "hi", "logit": 1}, {"text": "yo"}]}',
     "reference.prompts[1].logit is missing; it must be a finite number within +-10000"),
    ('"reference": {"prompts": [{"text": "hi", "logit": 1e300}]}',
     "reference.prompts[0].logit must be a finite number within +-10000; got 1e+300"),
    ('"reference": {"prompts": [{"text": "hi", "logit": true}]}',
     "reference.prompts[0].logit must be a finite number within +-10000; got true"),
    ('"reference": {"prompts": [{"text": "hi", "logit": 1}], "numerics": 3}', "reference.numerics must be a string; got 3"),
])
def test_a_manifest_field_out_of_range_is_refused_naming_the_file_and_field(tmp_path, fitted, text, message):
    backbone, manifest = _saved(tmp_path, fitted)
    key = text.split('"')[1]
    manifest[key] = "PLACEHOLDER"
    raw = json.dumps(manifest).replace(f'"{key}": "PLACEHOLDER"', text)
    (tmp_path / "probe.json").write_text(raw)
    for info in (backbone.info, None):
        with pytest.raises(ProbeMismatch) as refused:
            load_probe(tmp_path, info)
        assert refused.value.message == f"probe file {tmp_path / 'probe.json'}: {message}"


def test_a_manifest_that_is_not_an_object_or_lacks_a_served_field_is_refused_by_name(tmp_path, fitted):
    backbone, manifest = _saved(tmp_path, fitted)
    path = tmp_path / "probe.json"
    path.write_text("[1, 2]")
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(tmp_path, backbone.info)
    assert refused.value.message == f"probe file {path} holds a JSON list, not an object"
    for key, need in (("threshold", "a finite number within +-10000 (a logit)"),  # "got None" (tester pass)
                      ("threshold_method", "a non-empty string"), ("peak_layer", "an integer decoder layer in 1..8"),
                      ("backbone", "an object with num_layers and hidden_size")):
        path.write_text(json.dumps({k: v for k, v in manifest.items() if k != key}))
        with pytest.raises(ProbeMismatch) as refused:  # was KeyError with a traceback
            load_probe(tmp_path, backbone.info)
        assert refused.value.message == f"probe file {path}: {key} is missing; it must be {need}"
    path.write_text(json.dumps({k: v for k, v in manifest.items() if k != "format_version"}))
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(tmp_path, backbone.info)
    assert refused.value.message == f"probe file {path}: format_version is missing; need the integer 1"
    path.write_text(json.dumps(manifest)[:-1] + ', "threshold": 0.5}')
    with pytest.raises(ProbeMismatch, match="key 'threshold' appears twice"):
        load_probe(tmp_path, backbone.info)


@pytest.mark.parametrize("name, change, message", [
    # zero feature_std made every score NaN, served as "allowed"; int32 directions flagged everything (breaker finding)
    ("feature_std", lambda v: np.zeros_like(v), "feature_std .* must be at least 1e-06 everywhere"),
    ("scales", lambda v: -v, "scales .* must be at least 1e-06 everywhere"),
    ("directions", lambda v: v.astype(np.int32), "directions .* is int32; need a float dtype"),
    ("feature_mean", lambda v: np.full_like(v, np.inf), "feature_mean .* holds non-finite values"),
    ("scorer.mlp.2.weight", lambda v: np.full_like(v, np.nan), r"scorer\.mlp\.2\.weight .* holds non-finite values"),
    ("centers", lambda v: v[:-1], r"centers .* has shape \(7,\); the manifest needs \(8,\)"),
    # these loaded, then every request failed (a 1e-40 std) or was flagged (zero directions): second breaker pass
    ("feature_std", lambda v: np.full_like(v, 1e-40), r"feature_std .* must be at least 1e-06 everywhere"),
    ("directions", lambda v: np.zeros_like(v), r"directions .* must hold unit vectors; layer 1 has norm 0"),
    ("directions", lambda v: v * 2, r"directions .* must hold unit vectors; layer \d+ has norm 2"),
])
def test_unusable_tensors_are_refused_by_name(tmp_path, fitted, name, change, message):
    from safetensors.numpy import load_file, save_file

    backbone, _ = _saved(tmp_path, fitted)
    tensors = load_file(str(tmp_path / "probe.safetensors"))
    tensors[name] = change(tensors[name])
    save_file(tensors, str(tmp_path / "probe.safetensors"))
    with pytest.raises(ProbeMismatch, match=message):
        load_probe(tmp_path, backbone.info)


SYNTHETIC = "trajectories of 0, +1, -1 and alternating +-1 per layer"
ZERO_STATES = "all-zero hidden states"


def _with_tensor(folder, name, value):
    """Set every entry of tensor ``name`` of the probe in ``folder`` to ``value``; the tensors file's path."""
    from safetensors.numpy import load_file, save_file

    path = folder / "probe.safetensors"
    tensors = load_file(str(path))
    tensors[name] = np.full_like(tensors[name], value)
    save_file(tensors, str(path))
    return path


def _score_problem(message: str) -> tuple[str, float | None]:
    """``message`` with the logit magnitude it names replaced by ``X``, and that magnitude (``None``: none named)."""
    found = re.search(r"logits up to (\S+) in magnitude", message)
    return re.sub(r"logits up to \S+ in", "logits up to X in", message), float(found.group(1)) if found else None


@pytest.mark.parametrize("name, value, on, least", [
    # finite tensors whose scores are not numbers (every request a 500), or not a scorer's (every prompt scored 0 or 1)
    ("feature_mean", 3e38, SYNTHETIC, None),
    ("scorer.mlp.0.weight", 3e38, SYNTHETIC, 1e38),
    ("scorer.mlp.2.weight", -3e38, SYNTHETIC, 1e38),
    ("scorer.mlp.0.bias", 1e6, SYNTHETIC, 1e5),
    ("centers", 3e38, ZERO_STATES, 1e37),  # the fake's scales are large enough to keep these scores finite
])
def test_finite_tensors_whose_scores_are_not_a_scorers_are_refused_naming_the_file(tmp_path, fitted, name, value, on,
                                                                                    least):
    backbone, _ = _saved(tmp_path, fitted)
    path = _with_tensor(tmp_path, name, value)
    what = "non-finite scores" if least is None else "logits up to X in magnitude"
    beyond = "" if least is None else ", beyond +-10000"
    note = "" if least is None else "a scorer's are in the tens: "
    for info in (backbone.info, None):
        with pytest.raises(ProbeMismatch) as refused:
            load_probe(tmp_path, info)
        message, magnitude = _score_problem(refused.value.message)
        assert message == (f"probe file {path} gives {what} on {on}{beyond} ({note}a center, scale, feature statistic or"
                           " scorer weight is out of range); refit the probe with `herald fit`")
        assert magnitude is None if least is None else magnitude >= least


def test_a_shipped_probe_with_out_of_range_centers_is_refused_at_load(tmp_path):
    # the tester's case: centers of 3e38 in a shipped probe loaded; with HERALD_WARMUP=false the server said ready and
    # every /classify was a 500
    import shutil
    from pathlib import Path

    folder = tmp_path / "probe"
    shutil.copytree(Path(__file__).resolve().parents[1] / "models" / "smollm2-135m-instruct", folder)
    path = _with_tensor(folder, "centers", 3e38)
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(folder)
    assert refused.value.message == (f"probe file {path} gives non-finite scores on {ZERO_STATES} (a center, scale,"
                                     " feature statistic or scorer weight is out of range); refit the probe with"
                                     " `herald fit`")


def test_the_shipped_probes_score_the_synthetic_inputs_as_a_scorer_does():
    # the load-time check (+-1e4) must pass real probes by a wide margin: their logits there are at most tens
    from pathlib import Path

    for folder in sorted(Path(__file__).resolve().parents[1].glob("models/*/")):
        probe, _ = load_probe(folder)
        layers = probe.directions.num_layers
        alternating = np.where(np.arange(layers) % 2 == 0, 1.0, -1.0)
        out = probe.predict_trajectories(np.stack([np.zeros(layers), np.ones(layers), -np.ones(layers), alternating]))
        assert np.abs(out.logits).max() < 100
        assert np.isfinite(probe.predict(np.zeros((1, layers, probe.directions.hidden_size), np.float32)).logits).all()


def test_a_non_finite_logit_is_an_error_not_an_allowed_prompt(fitted):
    _, probe, states = fitted
    broken = dataclasses.replace(probe, feature_stats=dataclasses.replace(probe.feature_stats, std=np.zeros(7, np.float32)))
    with np.errstate(divide="ignore", invalid="ignore"), pytest.raises(ValueError, match="non-finite logit"):
        broken.predict(states)


def test_a_label_too_thin_for_the_calibration_or_fit_part_is_named(fitted):
    backbone, _, states = fitted
    y = np.array([1] * 10 + [0] * 3)
    X = states[:13]
    one_row_sources = np.array(["h|1"] * 10 + [f"b{i}|0" for i in range(3)])  # one-row groups never calibrate
    with pytest.raises(ValueError, match=r"^no benign row in the calibration part: .* give more benign prompts per source$"):
        HeraldProbe().fit(X, y, groups=one_row_sources)
    with pytest.raises(ValueError, match=r"^1 benign rows left to fit the directions after the calibration part; need at least 2"):
        HeraldProbe(calibration_fraction=0.5).fit(X[:12], y[:12], groups=np.array(["h|1"] * 10 + ["b|0"] * 2))


def test_reference_logits_pass_within_the_tolerance_and_refuse_beyond_it(fitted):
    from herald_service.probes.reference import REFERENCE_PROMPTS, REFERENCE_TOLERANCE, check_reference, reference_block

    backbone, probe, _ = fitted
    block = reference_block(probe, backbone)
    assert [e["text"] for e in block["prompts"]] == list(REFERENCE_PROMPTS) and block["numerics"] == "float32 on cpu"
    logits = probe.predict(backbone.last_token_states(backbone.encode([user_turn(p) for p in REFERENCE_PROMPTS]))).logits
    assert [e["logit"] for e in block["prompts"]] == [round(float(x), 4) for x in logits]
    assert len({e["logit"] for e in block["prompts"]}) > 1  # real scores, not one constant
    assert check_reference({}, probe, backbone) is None  # a probe fitted before references: nothing checked
    assert check_reference({"reference": block}, probe, backbone) <= 5e-5  # the rounding only

    def moved(by: list[float]) -> dict:
        shifted = json.loads(json.dumps(block))
        for entry, delta in zip(shifted["prompts"], by):
            entry["logit"] += delta
        return {"reference": shifted}

    n = len(REFERENCE_PROMPTS)
    assert REFERENCE_TOLERANCE - 0.02 < check_reference(moved([REFERENCE_TOLERANCE - 0.01] * n), probe, backbone) \
        < REFERENCE_TOLERANCE
    # a few prompts far off (numerics move a rare prompt by several logits) pass: the median decides
    assert check_reference(moved([0.0] * (n // 2 + 1) + [-9.0] * (n // 2 - 1)), probe, backbone) < 1e-4
    with pytest.raises(ProbeMismatch) as refused:
        check_reference(moved([0.0] * (n // 2 - 1) + [4.0] * (n // 2 - 1) + [9.0, 0.0]), probe, backbone)
    text = refused.value.message
    assert refused.value.field == "probe"
    assert f"the logits of its {n} reference prompts moved by a median of 2.00 (tolerance 1), most" in text
    worst = n - 2
    shown = REFERENCE_PROMPTS[worst][:57] + "..." if len(REFERENCE_PROMPTS[worst]) > 60 else REFERENCE_PROMPTS[worst]
    recorded = block["prompts"][worst]["logit"] + 9.0
    assert f"{shown!r}: {recorded:.2f} when recorded in float32 on cpu, {logits[worst]:.2f} now in float32 on cpu." in text
    assert "delete it to convert anew" in text and "herald fit" in text and "reference block edited" in text
    # a damaged probe.safetensors fails the same check: the message names it beside the weights (operator tester: it
    # named only the backbone, and its remedy deleted a good conversion)
    assert "probe.safetensors damaged or replaced" in text and "copy it again from its source" in text
    # a hand-edited prompt that renders long is refused before the forward pass: 64 of 6,000 tokens held a load for
    # over 10 minutes and 11.6 GB (tester finding)
    long = moved([0.0] * n)
    long["reference"]["prompts"][3]["text"] = " ".join(["word"] * 200)
    with pytest.raises(ProbeMismatch) as refused:
        check_reference(long, probe, backbone)
    assert refused.value.message.startswith("probe.json's reference.prompts[3].text renders to 2")
    assert refused.value.message.endswith("tokens on 'herald/fake-backbone'; a reference prompt may have at most 128")


def test_a_reference_refused_with_bf16_linear_layers_now_and_not_when_recorded_names_the_way_out(fitted, monkeypatch):
    # Tester finding: a probe just fitted in fp32 on a random OLMo-2 was refused under herald serve's bf16 linear
    # layers (median 1.22, tolerance 1), and the message blamed only the weights and the probe's files.
    from herald_service.probes.reference import REFERENCE_PROMPTS, check_reference, reference_block

    backbone, probe, _ = fitted
    block = reference_block(probe, backbone)  # recorded in float32, as herald fit runs
    moved = json.loads(json.dumps(block))
    for entry in moved["prompts"]:
        entry["logit"] += 1.22
    monkeypatch.setattr(backbone, "info", dataclasses.replace(backbone.info, matmul_dtype="bfloat16"))
    with pytest.raises(ProbeMismatch) as refused:
        check_reference({"reference": moved}, probe, backbone)
    text = refused.value.message
    assert f"its {len(REFERENCE_PROMPTS)} reference prompts moved by a median of 1.22 (tolerance 1)" in text
    assert "now in float32 with bfloat16 linear layers on cpu. The linear layers ran in bfloat16 now and at the" \
           " weights' dtype when the logits were recorded" in text
    assert ("with HERALD_MATMUL_DTYPE=weights (herald serve) or --matmul-dtype weights (herald classify, plot,"
            " steer-eval). If it is refused in those numerics too, either the weights (or the tokenizer or chat"
            " template) differ") in text
    moved["numerics"] = "float32 with bfloat16 linear layers on cpu"  # recorded with them: the numerics are not it
    with pytest.raises(ProbeMismatch) as refused:
        check_reference({"reference": moved}, probe, backbone)
    assert "HERALD_MATMUL_DTYPE" not in refused.value.message and " Either the weights (or" in refused.value.message


@pytest.mark.parametrize("revision", [None, "gguf-sha256:new"])
def test_a_reference_moved_further_than_bf16_explains_names_other_weights_not_the_linear_layers(fitted, monkeypatch,
                                                                                                revision):
    # tester finding: damaged GGUF weights (median 3.02) were told bf16 linear layers "can move a model's logits this
    # far", and a GGUF's revision was called "a sha256 of the weight, config and tokenizer files"
    from herald_service.probes.reference import BF16_PLAUSIBLE_MEDIAN, check_reference, reference_block

    backbone, probe, _ = fitted
    moved = json.loads(json.dumps(reference_block(probe, backbone)))
    for entry in moved["prompts"]:
        entry["logit"] += 3.02
    assert 3.02 > BF16_PLAUSIBLE_MEDIAN
    info = dataclasses.replace(backbone.info, matmul_dtype="bfloat16", **({"revision": revision} if revision else {}))
    monkeypatch.setattr(backbone, "info", info)
    with pytest.raises(ProbeMismatch) as refused:
        check_reference({"reference": moved, "backbone": {"revision": "gguf-sha256:old"} if revision else {}}, probe,
                        backbone)
    text = refused.value.message
    assert "can move a model's logits this far" not in text and "--matmul-dtype weights" not in text
    assert ("now in float32 with bfloat16 linear layers on cpu. The linear layers " + ("also " if revision else "")
            + "ran in bfloat16 now and at the weights' dtype when the logits were recorded, but that is not the likely"
            " cause: bf16 moved the embedded backbone's by a median of at most 0.15 (benchmarks/reference_check.py),"
            " not 3.02.") in text
    if revision:
        assert ("its revision is 'gguf-sha256:new', probe.json records 'gguf-sha256:old' (the GGUF file's sha256), so"
                " other weights are the likely cause") in text
        assert "weight, config and tokenizer files" not in text
    else:
        assert ("not 3.02. Most likely either the weights (or the tokenizer or chat template) differ from the ones the"
                " probe was fitted on") in text


def test_a_reference_refused_on_a_backbone_of_another_revision_says_so_before_the_numerics(fitted, monkeypatch):
    # tester finding: the first advice blamed bf16 linear layers though the content-sha256 revisions differed
    from herald_service.probes.reference import check_reference, reference_block

    backbone, probe, _ = fitted
    moved = json.loads(json.dumps(reference_block(probe, backbone)))
    for entry in moved["prompts"]:
        entry["logit"] += 1.5
    monkeypatch.setattr(backbone, "info", dataclasses.replace(backbone.info, matmul_dtype="bfloat16",
                                                              revision="content-sha256:new"))
    with pytest.raises(ProbeMismatch) as refused:
        check_reference({"reference": moved, "backbone": {"revision": "content-sha256:old"}}, probe, backbone)
    text = refused.value.message
    # the first sentence says the weights differ (it opened with the numerics: tester nit)
    assert text.startswith(
        f"the backbone {backbone.info.model_id!r} is not the one the probe was fitted on, and does not give its reference"
        " scores: its revision is 'content-sha256:new', probe.json records 'content-sha256:old' (a sha256 of the model"
        " folder's weight, config and tokenizer files), so other weights are the likely cause: serve the backbone the"
        " probe was fitted on,"
        " or fit a probe for this one with `herald fit`. The logits of its "), text
    after_numbers = text[text.index("now in float32 with bfloat16 linear layers on cpu.") + 50:]
    assert after_numbers.startswith(" The linear layers also ran in bfloat16 now"), after_numbers
    # the same revision: the numerics come first, as before
    with pytest.raises(ProbeMismatch) as refused:
        check_reference({"reference": moved, "backbone": {"revision": "content-sha256:new"}}, probe, backbone)
    assert "The backbone is not the one" not in refused.value.message
    assert "now in float32 with bfloat16 linear layers on cpu. The linear layers ran in bfloat16" in refused.value.message


def test_the_same_probe_is_saved_as_the_same_bytes(tmp_path, fitted):
    # tester finding: probe.safetensors of two fits with the same seed differed: safetensors writes its metadata map
    # in an order that changes from call to call, and the header had two keys
    import struct

    backbone, probe, states = fitted
    saved = []
    for run in range(20):  # with two keys, 20 saves in one order would happen once in 2**19
        save_probe(probe, tmp_path / str(run), {"backbone": backbone_manifest(backbone.info)})
        saved.append((tmp_path / str(run) / "probe.safetensors").read_bytes())
    assert len(set(saved)) == 1
    size = struct.unpack("<Q", saved[0][:8])[0]
    assert json.loads(saved[0][8:8 + size])["__metadata__"] == {"format": "herald-probe"}
    loaded, _ = load_probe(tmp_path / "0", backbone.info)
    assert np.array_equal(loaded.predict(states).flagged, probe.predict(states).flagged)


def test_a_target_fpr_threshold_records_its_target_beside_the_method(tmp_path, fitted):
    # herald fit --threshold-method target_fpr --target-fpr 0.3 recorded the method in probe.json, not the rate it aimed at
    backbone, shipped_recipe, states = fitted
    _, labels = synthetic_corpus(60)
    probe = HeraldProbe(threshold_method="target_fpr", target_fpr=0.3).fit(states, np.array(labels)).fitted_
    assert probe.target_fpr == 0.3 and shipped_recipe.target_fpr is None
    save_probe(probe, tmp_path / "fpr", {"backbone": backbone_manifest(backbone.info)})
    manifest = json.loads((tmp_path / "fpr" / "probe.json").read_text())
    keys = list(manifest)
    assert keys[keys.index("threshold"):keys.index("threshold") + 4] == ["threshold", "threshold_method", "target_fpr",
                                                                        "peak_layer"]
    assert (manifest["threshold_method"], manifest["target_fpr"]) == ("target_fpr", 0.3)
    loaded, _ = load_probe(tmp_path / "fpr", backbone.info)
    assert (loaded.threshold_method, loaded.target_fpr, loaded.threshold) == ("target_fpr", 0.3, probe.threshold)
    save_probe(shipped_recipe, tmp_path / "f1", {"backbone": backbone_manifest(backbone.info)})  # max_f1: no target
    manifest = json.loads((tmp_path / "f1" / "probe.json").read_text())
    assert manifest["threshold_method"] == "max_f1" and "target_fpr" not in manifest
    assert load_probe(tmp_path / "f1", backbone.info)[0].target_fpr is None


def test_a_save_stopped_mid_write_leaves_the_previous_probe_whole(tmp_path, fitted, monkeypatch):
    # tester finding: probe.safetensors and probe.json were written in place; a fit stopped during the write left a
    # file cut short. Each is now written to a temporary file and renamed over the old one.
    import os

    from herald_service import out_path

    backbone, probe, states = fitted
    save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info)})
    before = {name: (tmp_path / name).read_bytes() for name in ("probe.safetensors", "probe.json")}
    calls = []

    def stopped(src, dst):
        calls.append(dst)
        raise KeyboardInterrupt  # the rename of the first file never happens

    monkeypatch.setattr(out_path.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        save_probe(probe, tmp_path, {"backbone": backbone_manifest(backbone.info), "extra": "x"})
    monkeypatch.undo()
    assert [os.path.basename(c) for c in calls] == ["probe.safetensors"]
    assert {name: (tmp_path / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["probe.json", "probe.safetensors"]  # no temporary left
    loaded, manifest = load_probe(tmp_path, backbone.info)
    assert "extra" not in manifest
    assert np.array_equal(loaded.predict(states).flagged, probe.predict(states).flagged)


def test_tensors_of_another_fit_beside_the_manifest_are_refused_naming_both_files(tmp_path, fitted, caplog):
    # tester finding: one fit's probe.safetensors beside another's probe.json was refused with a numerics message
    # ("moved by a median of 2.71 ... bfloat16 linear layers"); probe.json now records the tensors' sha256
    import hashlib

    backbone, probe, states = fitted
    other = HeraldProbe(seed=1).fit(states, np.array(synthetic_corpus(60)[1])).fitted_
    save_probe(probe, tmp_path / "a", {"backbone": backbone_manifest(backbone.info)})
    save_probe(other, tmp_path / "b", {"backbone": backbone_manifest(backbone.info)})
    tensors = (tmp_path / "a" / "probe.safetensors").read_bytes()
    manifest = json.loads((tmp_path / "a" / "probe.json").read_text())
    keys = list(manifest)
    assert keys[keys.index("directions_bytes") + 1] == "tensors_sha256"
    assert manifest["tensors_sha256"] == hashlib.sha256(tensors).hexdigest()
    (tmp_path / "b" / "probe.safetensors").write_bytes(tensors)
    recorded = json.loads((tmp_path / "b" / "probe.json").read_text())["tensors_sha256"]
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(tmp_path / "b", backbone.info)
    assert refused.value.message == (
        f"probe.safetensors is not the one probe.json was written with in {tmp_path / 'b'} (its sha256 is"
        f" {manifest['tensors_sha256'][:16]}…, probe.json records {recorded[:16]}…): refit, or copy both files together"
        " (HERALD_PROBE)")
    # a manifest without the field (every probe saved before it) loads as before, with a warning that says so
    assert not [r for r in caplog.records if "tensors_sha256" in r.getMessage()]
    del manifest["tensors_sha256"]
    (tmp_path / "a" / "probe.json").write_text(json.dumps(manifest))
    loaded, _ = load_probe(tmp_path / "a", backbone.info)
    assert np.array_equal(loaded.predict(states).flagged, probe.predict(states).flagged)
    warned = [r for r in caplog.records if "tensors_sha256" in r.getMessage()]
    assert [r.levelname for r in warned] == ["WARNING"]
    assert warned[0].getMessage() == (
        f"probe.json in {tmp_path / 'a'} records no tensors_sha256 (written before the field), so probe.safetensors is"
        " not checked against it: refit, or use the probe only with the tensors it was written with")
    (tmp_path / "a" / "probe.json").write_text(json.dumps({**manifest, "tensors_sha256": "ABC"}))
    with pytest.raises(ProbeMismatch) as refused:
        load_probe(tmp_path / "a", backbone.info)
    assert refused.value.message == (f"probe file {tmp_path / 'a' / 'probe.json'}: tensors_sha256 must be the sha256 of"
                                     ' probe.safetensors (64 lower-case hex digits); got "ABC"')


class _Waiting:
    """A log handler that sets an event once :func:`~herald_service.probes.folder.probe_folder_lock` says it waits:
    the point from which the writer is blocked on the lock (it has logged and is in, or about to enter, ``flock``)."""

    def __init__(self):
        import logging
        import threading

        self.event = threading.Event()
        self.handler = logging.Handler()
        self.handler.emit = lambda record: ("waiting for it to finish" in record.getMessage()) and self.event.set()


@pytest.fixture
def waiting(caplog):
    import logging

    seen = _Waiting()
    logger = logging.getLogger("herald_service.probes.folder")
    logger.addHandler(seen.handler)
    with caplog.at_level(logging.INFO, logger="herald_service.probes.folder"):
        yield seen.event
    logger.removeHandler(seen.handler)


def _other_pairs(tmp_path, fitted):
    """Two probes of other seeds saved in their own folders (``b`` and ``c``), each a whole pair."""
    from herald_service.backbone.fake import synthetic_corpus

    backbone, _, states = fitted
    labels = np.array(synthetic_corpus(60)[1])
    folders = []
    for seed, name in ((1, "b"), (2, "c")):
        probe = HeraldProbe(seed=seed).fit(states, labels).fitted_
        save_probe(probe, tmp_path / name, {"backbone": backbone_manifest(backbone.info), "writer": name})
        folders.append(tmp_path / name)
    return folders


def _in_a_thread(call):
    import threading

    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except Exception as exc:  # handed to the test, which asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_probe_write_waits_for_another_writer_of_its_folder_and_then_writes_a_whole_pair(tmp_path, fitted, waiting):
    # tester finding: two `herald fit --overwrite` into one --out both exited 0 and left probe.json of one and
    # probe.safetensors of the other (1 in 4 tries); the pair is now checked and written under the folder's lock
    import shutil

    from herald_service.probes.folder import probe_folder_lock

    backbone, probe, _ = fitted
    b, c = _other_pairs(tmp_path, fitted)
    out = tmp_path / "out"
    save_probe(probe, out, {"backbone": backbone_manifest(backbone.info), "writer": "a"})
    with probe_folder_lock(out):  # another writer holds the folder ...
        thread, outcome = _in_a_thread(lambda: save_probe(load_probe(b)[0], out, {
            "backbone": backbone_manifest(backbone.info), "writer": "b"}))
        assert waiting.wait(timeout=60), "the second writer never said it waits"
        for name in ("probe.safetensors", "probe.json"):  # ... and writes its pair meanwhile
            shutil.copyfile(c / name, out / name)
        assert thread.is_alive() and load_probe(out)[1]["writer"] == "c"  # the waiting one wrote nothing yet
    thread.join()
    assert outcome == {"value": None}
    loaded, manifest = load_probe(out, backbone.info)  # a whole pair: its tensors are those its manifest records
    assert manifest["writer"] == "b"
    assert (out / "probe.safetensors").read_bytes() == (b / "probe.safetensors").read_bytes()


def test_a_probe_write_that_must_not_replace_one_refuses_a_pair_written_while_it_waited(tmp_path, fitted, waiting):
    # herald fit without --overwrite: the "received a probe while this fit ran" check is made under the same lock as
    # the write, so a probe another fit wrote between the check and the write is not replaced either
    import shutil

    from herald_service.probes.folder import ProbeAlreadyThere, probe_folder_lock

    backbone, probe, _ = fitted
    _, c = _other_pairs(tmp_path, fitted)
    out = tmp_path / "out"
    out.mkdir()
    with probe_folder_lock(out):
        thread, outcome = _in_a_thread(lambda: save_probe(probe, out, {"backbone": backbone_manifest(backbone.info)},
                                                          keep_existing=True))
        assert waiting.wait(timeout=60), "the second writer never said it waits"
        for name in ("probe.safetensors", "probe.json"):
            shutil.copyfile(c / name, out / name)
    thread.join()
    assert isinstance(outcome.get("error"), ProbeAlreadyThere)
    assert outcome["error"].files == ["probe.json", "probe.safetensors"]
    assert str(outcome["error"]) == f"{out} holds a probe (probe.json, probe.safetensors)"
    for name in ("probe.safetensors", "probe.json"):  # the other writer's pair, untouched
        assert (out / name).read_bytes() == (c / name).read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["probe.json", "probe.safetensors"]  # no lock file left either


def test_a_probe_folder_held_by_another_writer_is_refused_when_told_not_to_wait(tmp_path):
    from herald_service.probes.folder import ProbeFolderBusy, probe_folder_lock

    with probe_folder_lock(tmp_path):
        with pytest.raises(ProbeFolderBusy, match=f"^another process is writing the probe in {re.escape(str(tmp_path))}$"):
            with probe_folder_lock(tmp_path, wait=False):
                pass
    with probe_folder_lock(tmp_path, wait=False):  # let go when the holder's block ended
        pass
