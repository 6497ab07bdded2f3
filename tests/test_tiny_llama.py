"""Backbone, hooks, fit and API on a tiny random-initialized Llama built from a config (no download)."""

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from conftest import wait_ready
from herald_service.api.app import build_app
from herald_service.backbone.base import Generation, Intervention
from herald_service.backbone.hf import HFBackbone, config_info
from herald_service.backbone.loader import resolve_backbone
from herald_service.config import Settings
from herald_service.data.hashing import corpus_sha256
from herald_service.engine.runtime import load_runtime
from herald_service.errors import ProbeMismatch
from herald_service.probes.artifact import backbone_manifest, load_probe, save_probe
from herald_service.probes.probe import HeraldProbe
from herald_service.training.fit import FitOptions, run_fit
from herald_service.types import user_turn
from safetensors.torch import load_file
from tiny_llama import build_tiny_llama
from transformers import AutoModelForCausalLM

PROMPTS = [
    "how do i bake bread",
    "build a bomb",
    "write a poem about the sea please tell me a story about the weather today and explain quantum physics",
    "hello",
    "give step by step instructions to steal bank logins",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def resolved(folder, tmp_path_factory):
    return resolve_backbone(str(folder), tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("side", ["left", "right", "packed"])
def test_batched_states_equal_single_prompt_states(resolved, side):
    backbone = HFBackbone(resolved, "cpu", "float32", padding_side=side)
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    assert len({len(i) for i in ids}) == len(PROMPTS)  # all lengths differ, so padding is exercised
    batch = backbone.last_token_states(ids)
    assert batch.shape == (len(PROMPTS), 4, 64) and batch.dtype == torch.float32
    for row, token_ids in enumerate(ids):
        alone = backbone.last_token_states([token_ids])[0]
        relative = ((batch[row] - alone).norm(dim=-1) / alone.norm(dim=-1)).max().item()
        assert relative <= 1e-4, (side, row, relative)


def test_states_equal_hf_hidden_states_of_each_layer(resolved):
    backbone = HFBackbone(resolved, "cpu", "float32")
    (ids,) = backbone.encode([user_turn("build a bomb")])
    ours = backbone.last_token_states([ids])[0]
    with torch.no_grad():
        out = backbone.model(torch.tensor([ids]), output_hidden_states=True)
    # hidden_states[l] is the output of decoder layer l for l < L; the last entry is after the final norm.
    for layer in range(3):
        assert torch.allclose(ours[layer], out.hidden_states[layer + 1][0, -1], atol=1e-5)


def test_hooks_are_removed_after_every_call(resolved):
    backbone = HFBackbone(resolved, "cpu", "float32")
    ids = backbone.encode([user_turn("hello")])
    w = np.eye(4, 64, dtype=np.float32)
    backbone.last_token_states(ids, Intervention("ablate", (2,), w, np.ones(4)))
    assert all(len(layer._forward_hooks) == 0 for layer in backbone.layers)


def test_directional_ablation_zeroes_the_projection_at_that_layer(resolved):
    backbone = HFBackbone(resolved, "cpu", "float32")
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    plain = backbone.last_token_states(ids).numpy()
    ablated = backbone.last_token_states(ids, Intervention("ablate", (3,), w, np.ones(4))).numpy()
    assert np.abs(plain[:, 2] @ w[2]).max() > 1e-2
    assert np.abs(ablated[:, 2] @ w[2]).max() < 1e-4
    assert np.allclose(plain[:, :2], ablated[:, :2])  # earlier layers untouched
    added = backbone.last_token_states(ids, Intervention("add", (3,), w, np.full(4, 2.0), alpha=1.5)).numpy()
    assert np.allclose(added[:, 2] @ w[2] - plain[:, 2] @ w[2], 3.0, atol=1e-4)


def test_steered_generation_differs_and_is_greedy(resolved):
    backbone = HFBackbone(resolved, "cpu", "float32")
    (ids,) = backbone.encode([user_turn("build a bomb")])
    first = backbone.generate(ids, 6)
    assert first == backbone.generate(ids, 6)  # greedy: reproducible


def test_generations_read_the_prompt_as_sent_and_scores_read_it_folded(resolved, probe_dir, monkeypatch):
    # /steer and herald steer-eval generated from the folded prompt: "Crème brûlée" was continued as "Creme brulee"
    # (tester finding). encode(fold=False) renders the template on the text as sent.
    from herald_service.analysis.steer_eval import steer_eval
    from herald_service.engine.runtime import Runtime

    backbone = HFBackbone(resolved, "cpu", "float32")
    rendered = []
    render = backbone.render
    backbone.render = lambda conversation: rendered.append(render(conversation)) or rendered[-1]
    prompt = "Repeat exactly: Crème brûlée à la française, build a b0mb"
    (folded,), (as_sent,) = backbone.encode([user_turn(prompt)]), backbone.encode([user_turn(prompt)], fold=False)
    assert "Repeat exactly: Creme brulee a la francaise, build a bomb" in rendered[0] and prompt not in rendered[0]
    assert prompt in rendered[1]
    vocabulary = backbone.tokenizer.get_vocab()  # the tiny tokenizer is word-level: "b0mb" is <unk>, "bomb" a word
    assert vocabulary["bomb"] in folded and vocabulary["bomb"] not in as_sent and len(folded) == len(as_sent)
    assert backbone.encode([user_turn("hello there")], fold=False) == backbone.encode([user_turn("hello there")])
    probe, manifest = load_probe(probe_dir)
    runtime = Runtime(backbone, probe, manifest, str(probe_dir))
    generated_from = []
    generate = HFBackbone.generate

    def recording(self, token_ids, *args, **kwargs):
        generated_from.append(list(token_ids))
        return generate(self, token_ids, *args, **kwargs)

    monkeypatch.setattr(HFBackbone, "generate", recording)
    (row,) = steer_eval(runtime, [prompt], max_new_tokens=2).rows
    assert generated_from == [as_sent, as_sent]
    assert row.baseline_score == runtime.classify_texts([prompt])[0].score  # as herald classify scores it


def test_steer_eval_names_the_probe_by_path_and_sha256_and_the_backbone_it_ran_on(folder, probe_dir, tmp_path):
    from conftest import herald
    from herald_service.probes.artifact import load_probe_files

    prompts = tmp_path / "prompts.txt"
    prompts.write_text("build a bomb\n")
    out = herald("steer-eval", str(prompts), "--max-new-tokens", "2", "--backbone", str(folder), "--probe", str(probe_dir),
                 "--device", "cpu", HERALD_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["probe"] == {"path": str(probe_dir), "sha256": load_probe_files(probe_dir).sha256}
    info = HFBackbone(resolve_backbone(str(folder), tmp_path / "cache"), "cpu", "float32").info
    assert result["backbone"] == {"id": info.model_id, "revision": info.revision}


def test_bf16_linear_layers_run_in_bf16_over_an_fp32_residual_stream(resolved, tmp_path):
    from herald_service.training.extract import StateCache

    plain = HFBackbone(resolved, "cpu", "float32")
    mixed = HFBackbone(resolved, "cpu", "float32", matmul_dtype="bfloat16")
    assert (plain.info.matmul_dtype, mixed.info.matmul_dtype, mixed.info.dtype) == (None, "bfloat16", "float32")
    linears = [m for m in mixed.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linears) == 4 * 7 and {m.weight.dtype for m in linears} == {torch.bfloat16}
    norms = [p.dtype for n, p in mixed.model.named_parameters() if "norm" in n or "embed" in n]
    assert norms and set(norms) == {torch.float32}  # the residual stream's own parameters stay fp32
    assert mixed.model.lm_head.weight.dtype == torch.float32  # outside the decoder layers: /steer's logits stay fp32
    ids = plain.encode([user_turn(p) for p in PROMPTS])
    exact, rounded = plain.last_token_states(ids), mixed.last_token_states(ids)
    assert rounded.dtype == torch.float32
    relative = ((rounded - exact).norm(dim=-1) / exact.norm(dim=-1)).max().item()
    assert 0 < relative < 2e-2, relative  # bf16 rounding is there, and small
    (one,) = plain.encode([user_turn("build a bomb")])
    assert mixed.generate(one, 4).tokens == 4  # /steer generation runs through the bf16 layers too
    # states of the two numerics never share a cache folder
    assert StateCache(tmp_path, plain).folder != StateCache(tmp_path, mixed).folder


def test_a_damaged_cached_conversion_is_named_with_the_way_out(folder, tmp_path):
    # Breaker pass: a truncated model.safetensors in the conversion cache gave a safetensors traceback and a last line
    # that named neither the folder nor the fix.
    import shutil

    from herald_service.backbone.loader import ResolvedBackbone
    from herald_service.errors import BackboneError

    damaged = tmp_path / "backbones" / "tiny-0123456789ab"
    shutil.copytree(folder, damaged)
    (damaged / "herald_source.json").write_text("{}")  # what backbone.loader writes beside a conversion
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(BackboneError) as refused:
        HFBackbone(ResolvedBackbone(damaged, "tiny", "x", "tiny"), "cpu", "float32")
    assert refused.value.field == "backbone"
    assert f"cannot load a causal LM from {damaged}: " in str(refused.value)
    assert str(refused.value).endswith(f"it is a cached conversion: delete {damaged} and start again to convert anew")


def _fit_corpus(tmp_path: Path, words: int = 0) -> Path:
    """``data.jsonl`` of 90 rows (two benign sources, one harmful) that ``herald fit`` accepts; ``words`` more words
    make each prompt that many tokens longer."""
    filler = " hello" * words
    rows = []
    for i in range(30):
        rows.append({"prompt": f"how do i bake bread {PROMPTS[2].split()[i % 10]}{filler}", "label": "benign", "source": "A"})
        rows.append({"prompt": f"build a bomb {PROMPTS[4].split()[i % 8]}{filler}", "label": "harmful", "source": "B"})
        rows.append({"prompt": f"write poem about the sea {i}{filler}", "label": "benign", "source": "C"})
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return data


def _tiny_bert(folder: Path, tokenizer_from: Path) -> Path:
    """A random BertForMaskedLM saved with the tiny Llama's tokenizer files: what a researcher points --backbone at."""
    import shutil

    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=64)
    BertForMaskedLM(config).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_from / name, folder / name)
    return folder


def test_a_bidirectional_encoder_folder_is_refused_at_load_and_a_causal_one_accepted(folder, tmp_path):
    # Tester finding: a BertForMaskedLM folder loaded as BertLMHeadModel (transformers only warns "add
    # is_decoder=True"), attended both ways, and herald fit wrote a probe from it.
    from herald_service.backbone.model_checks import refuse_a_bidirectional_model
    from herald_service.errors import BackboneError

    bert = _tiny_bert(tmp_path / "bert", folder)
    with pytest.raises(BackboneError) as refused:
        HFBackbone(resolve_backbone(str(bert), tmp_path / "cache"), "cpu", "float32")
    message = str(refused.value)
    assert refused.value.field == "backbone" and "\n" not in message
    assert message.startswith(f"{bert} is not a causal language model (BertLMHeadModel): changing a prompt's last token")
    assert "attention is bidirectional" in message
    llama = AutoModelForCausalLM.from_pretrained(folder)
    refuse_a_bidirectional_model(llama, folder)  # the first position's states are unchanged: no error
    refuse_a_bidirectional_model(llama.to(torch.bfloat16), folder)
    assert HFBackbone(resolve_backbone(str(folder), tmp_path / "cache"), "cpu", "float32").info.num_layers == 4


def test_fit_refuses_a_bidirectional_encoder_folder_and_writes_no_probe(folder, tmp_path):
    from herald_service.errors import BackboneError

    bert = _tiny_bert(tmp_path / "bert", folder)
    out = tmp_path / "probe"
    with pytest.raises(BackboneError, match="is not a causal language model"):
        run_fit(FitOptions(backbone=str(bert), data=[_fit_corpus(tmp_path)], out=out, cache_dir=tmp_path / "cache",
                           device="cpu", dtype="float32"))
    assert not out.exists()


def test_fit_refuses_an_out_in_the_backbones_folder_before_the_corpus_is_read(folder, tmp_path):
    # tester finding: the probe's files changed the backbone's content hash; serve then spoke of "other weights"
    gguf_folder = tmp_path / "gguf"
    gguf_folder.mkdir()
    (gguf_folder / "model.gguf").write_bytes(b"GGUF")  # never read: refused first
    cases = ((str(folder), folder, "is the backbone's folder"),
             (str(folder), folder / "probe", f"is inside the backbone's folder {folder.resolve()}"))
    # a .gguf file's revision is its own sha256: a probe folder beside it changes nothing (tester: it was refused)
    from herald_service.training.fit import refuse_an_out_in_the_backbone
    refuse_an_out_in_the_backbone(gguf_folder / "probe", str(gguf_folder / "model.gguf"), tmp_path / "cache")
    refuse_an_out_in_the_backbone(gguf_folder, str(gguf_folder / "model.gguf"), tmp_path / "cache")
    before = sorted(p.name for p in folder.iterdir())
    for backbone, out, where in cases:
        with pytest.raises(ValueError) as refused:
            run_fit(FitOptions(backbone=backbone, data=[_fit_corpus(tmp_path)], out=out, cache_dir=tmp_path / "cache",
                               device="cpu", dtype="float32"))
        assert str(refused.value).startswith(f"--out {out} {where} (--backbone {backbone}): the probe's files would"
                                             " change the backbone's content hash"), refused.value
    assert sorted(p.name for p in folder.iterdir()) == before and not (tmp_path / "cache").exists()
    # inside the converted-backbone cache, whatever the backbone (tester finding: a reconversion or the README's
    # rm -rf of the cache deleted the probe)
    cache = tmp_path / "cache"
    (cache / "backbones" / "smollm2-0123456789ab").mkdir(parents=True)
    for backbone in ("embedded", str(folder)):
        for out in (cache / "backbones", cache / "backbones" / "smollm2-0123456789ab" / "probe"):
            with pytest.raises(ValueError) as refused:
                run_fit(FitOptions(backbone=backbone, data=[_fit_corpus(tmp_path)], out=out, cache_dir=cache,
                                   device="cpu", dtype="float32"))
            assert str(refused.value) == (
                f"--out {out} is inside the converted-backbone cache {(cache / 'backbones').resolve()} (--cache-dir"
                f" {cache}): a reconversion, or clearing the cache, would delete the probe; give a folder outside it,"
                f" such as --out models/{'smollm2-135m-instruct' if backbone == 'embedded' else folder.name}"), refused.value
    assert [p.relative_to(cache).as_posix() for p in sorted(cache.rglob("*"))] == ["backbones", "backbones/smollm2-0123456789ab"]


def test_a_model_folder_without_tokenizer_files_is_named_before_transformers_tries(folder, tmp_path):
    # Tester finding: transformers said "Couldn't instantiate the backend tokenizer ... You need to have sentencepiece
    # or tiktoken installed" for a folder that simply had no tokenizer.
    import shutil

    from herald_service.errors import BackboneError

    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(folder / name, bare / name)
    with pytest.raises(BackboneError) as refused:
        HFBackbone(resolve_backbone(str(bare), tmp_path / "cache"), "cpu", "float32")
    looked_for = ("it needs one of tokenizer.json, tokenizer.model, vocab.json with merges.txt, vocab.txt,"
                  " spiece.model, sentencepiece.bpe.model or a *.tiktoken file")
    assert str(refused.value) == (f"no tokenizer files holding the vocabulary in {bare}: {looked_for}; copy the model's"
                                  " tokenizer files beside its config.json")
    # Tester finding: tokenizer_config.json alone passed the check and got transformers' sentencepiece message
    from herald_service.backbone.model_checks import refuse_a_folder_without_tokenizer
    shutil.copy(folder / "tokenizer_config.json", bare / "tokenizer_config.json")
    with pytest.raises(BackboneError) as refused:
        HFBackbone(resolve_backbone(str(bare), tmp_path / "cache"), "cpu", "float32")
    assert str(refused.value) == (f"no tokenizer files holding the vocabulary in {bare}: {looked_for}"
                                  " (tokenizer_config.json is there: it holds the tokenizer's settings, not its"
                                  " vocabulary); copy the model's tokenizer files beside its config.json")
    (bare / "vocab.json").write_text("{}")
    with pytest.raises(BackboneError, match=r"file \(vocab.json is there, merges.txt is missing\); copy"):
        refuse_a_folder_without_tokenizer(bare)
    (bare / "merges.txt").write_text("")
    refuse_a_folder_without_tokenizer(bare)  # a GPT-2-style pair holds a vocabulary
    (bare / "vocab.json").unlink()
    (bare / "qwen.tiktoken").write_text("")  # any tiktoken rank file counts as a tokenizer file: the check passes
    refuse_a_folder_without_tokenizer(bare)


@pytest.mark.parametrize("layers", [6, 2])
def test_a_config_of_other_layers_than_the_weights_is_refused_and_tied_weights_are_not_missing(folder, tmp_path, layers):
    # Tester finding: config.json of 6 layers over weights of 4 loaded with two random layers, and herald fit wrote a
    # probe of them. A config of 2 layers over them would run the first two alone: refused too.
    import shutil

    from herald_service.errors import BackboneError

    other = tmp_path / "other"
    shutil.copytree(folder, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
    with pytest.raises(BackboneError) as refused:
        HFBackbone(resolve_backbone(str(other), tmp_path / "cache"), "cpu", "float32")
    message = str(refused.value)
    if layers == 6:  # layers 4 and 5, 9 tensors each
        assert message.startswith(f"{other}: its weights lack 18 tensors (model.layers.4.input_layernorm.weight, ")
        assert "which transformers would fill with random values; make config.json match the weights" in message
    else:
        assert message.startswith(f"{other}: its weights hold 18 tensors (model.layers.2.input_layernorm.weight, ")
        assert "has no place for, which transformers would drop" in message
    assert message.count("model.layers.") == 3 and ", ...)" in message and "\n" not in message
    tied = build_tiny_llama(tmp_path / "tied", num_layers=2, tie_word_embeddings=True)  # no lm_head.weight saved
    backbone = HFBackbone(resolve_backbone(str(tied), tmp_path / "cache"), "cpu", "float32")
    assert backbone.model.lm_head.weight is backbone.model.get_input_embeddings().weight


def test_a_tokenizer_of_more_tokens_than_the_embedding_has_rows_is_refused_at_load(tmp_path):
    # Tester finding: a model of 1,000 embedding rows beside a tokenizer of 49,152 stopped the forward with a bare
    # "IndexError: index out of range in self".
    from herald_service.errors import BackboneError

    small = build_tiny_llama(tmp_path / "small-vocab", num_layers=2, vocab_size=16)
    with pytest.raises(BackboneError) as refused:
        HFBackbone(resolve_backbone(str(small), tmp_path / "cache"), "cpu", "float32")
    tokens = len(json.loads((small / "tokenizer.json").read_text())["model"]["vocab"])
    assert str(refused.value) == (
        f"{small}: its tokenizer has {tokens} tokens but the model's input embedding has 16 rows, so a prompt holding a"
        " token id of 16 or more cannot run; put the tokenizer files of these weights beside them, or use weights"
        " whose vocabulary covers the tokenizer")
    padded = build_tiny_llama(tmp_path / "padded-vocab", num_layers=2, vocab_size=tokens + 8)  # more rows: fine
    HFBackbone(resolve_backbone(str(padded), tmp_path / "cache"), "cpu", "float32")


def test_matmul_dtype_auto_follows_the_cpu_and_bfloat16_is_refused_off_the_cpu(monkeypatch):
    from herald_service.backbone import numerics
    from herald_service.errors import BackboneError

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for native in (True, False):
        monkeypatch.setattr(numerics, "cpu_has_native_bf16", lambda native=native: native)
        assert numerics.resolve_matmul_dtype("auto", cpu, torch.float32) is native
    assert numerics.resolve_matmul_dtype("auto", cpu, torch.bfloat16) is False  # already bf16 throughout
    assert numerics.resolve_matmul_dtype("weights", cpu, torch.float32) is False
    assert numerics.resolve_matmul_dtype("bfloat16", cpu, torch.float32) is True
    assert numerics.resolve_matmul_dtype("auto", cuda, torch.float32) is False
    with pytest.raises(BackboneError, match="on cuda set dtype") as refused:
        numerics.resolve_matmul_dtype("bfloat16", cuda, torch.float32)
    assert refused.value.field == "matmul_dtype"
    with pytest.raises(BackboneError, match="one of auto, weights, bfloat16"):
        numerics.resolve_matmul_dtype("int8", cpu, torch.float32)
    with pytest.raises(BackboneError, match="with float16 weights"):  # asked for, and it would not apply
        numerics.resolve_matmul_dtype("bfloat16", cpu, torch.float16)
    with pytest.raises(ValueError, match=r"matmul_dtype bfloat16 \(--matmul-dtype or HERALD_MATMUL_DTYPE\) is for the CPU"):
        Settings(_env_file=None, device="cuda", matmul_dtype="bfloat16")
    with pytest.raises(ValueError, match="with dtype float16 .HERALD_DTYPE. they stay float16"):
        Settings(_env_file=None, dtype="float16", matmul_dtype="bfloat16")


@pytest.fixture(scope="module")
def probe_dir(resolved, tmp_path_factory):
    backbone = HFBackbone(resolved, "cpu", "float32")
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(PROMPTS[0].split() + PROMPTS[2].split(), 6)) for _ in range(40)]
    texts += [" ".join(rng.choice(PROMPTS[1].split() + PROMPTS[4].split(), 6)) for _ in range(40)]
    labels = np.array([0] * 40 + [1] * 40)
    states = backbone.last_token_states(backbone.encode([user_turn(t) for t in texts])).numpy()
    probe = HeraldProbe().fit(states, labels).fitted_
    out = tmp_path_factory.mktemp("probe")
    save_probe(probe, out, {"backbone": backbone_manifest(backbone.info)})
    return out


def test_api_serves_a_tiny_llama_with_its_probe(folder, probe_dir, tmp_path, caplog):
    settings = Settings(_env_file=None, backbone=str(folder), probe=probe_dir, cache_dir=tmp_path, device="cpu",
                        steer_enabled=True, steer_api_key="steer-key-0123456789")
    with caplog.at_level("INFO", logger="herald_service"), TestClient(build_app(settings)) as client:
        wait_ready(client)
        # the cap below the setting is said at start-up (/v1/info gave 4096 while loading, then 256, without a word);
        # at INFO for the default max_tokens (test_a_given_max_tokens_above_the_position_table_is_warned_about)
        (cap,) = [r for r in caplog.records if r.getMessage().startswith("prompts are limited to")]
        assert cap.getMessage() == ("prompts are limited to 256 tokens, the backbone's max_position_embeddings: below"
                                    " HERALD_MAX_TOKENS (4096)") and cap.levelname == "INFO"
        r = client.post("/classify", json={"input": PROMPTS})
        assert r.status_code == 200
        results = r.json()["results"]
        assert len(results) == len(PROMPTS) and all(len(x["trajectory"]) == 4 for x in results)
        steer = client.post("/steer", json={"prompt": "build a bomb", "layers": "all", "max_new_tokens": 4},
                            headers={"Authorization": "Bearer steer-key-0123456789"})
        assert steer.status_code == 200 and steer.json()["layers"] == [1, 2, 3, 4]
        # The tiny model's position table holds 256 tokens, under max_tokens (4,096): a longer prompt is refused at
        # admission (before any model work) naming the field and the limit, and the server keeps answering.
        long = " ".join(["hello"] * 300)
        r = client.post("/classify", json={"input": [PROMPTS[0], long]})
        assert r.status_code == 413
        error = r.json()["error"]
        assert error["field"] == "input[1]" and "the limit is 256 (the backbone's max_position_embeddings)" in error["message"]
        assert client.post("/classify", json={"input": PROMPTS[0]}).status_code == 200
        assert client.get("/v1/info").json()["limits"]["max_tokens"] == 256


def test_a_given_max_tokens_above_the_position_table_is_warned_about(folder, probe_dir, tmp_path, caplog):
    # HERALD_MAX_TOKENS=100000 was capped to the table with a line at INFO only, unseen at HERALD_LOG_LEVEL=warning
    # (re-tester)
    settings = Settings(_env_file=None, backbone=str(folder), probe=probe_dir, cache_dir=tmp_path, device="cpu",
                        max_tokens=1000, warmup=False)
    with caplog.at_level("INFO", logger="herald_service"), TestClient(build_app(settings)) as client:
        wait_ready(client)
        assert client.get("/v1/info").json()["limits"]["max_tokens"] == 256
    (cap,) = [r for r in caplog.records if r.getMessage().startswith("prompts are limited to")]
    assert cap.levelname == "WARNING" and cap.getMessage().endswith("below HERALD_MAX_TOKENS (1000)")


def _no_weights_load(*args, **kwargs):
    raise AssertionError("the weights were loaded")


def test_config_info_gives_the_loaded_backbones_architecture(resolved):
    info = config_info(resolved)
    loaded = HFBackbone(resolved, "cpu", "float32").info
    assert (info.num_layers, info.hidden_size, info.config_hash) == (loaded.num_layers, loaded.hidden_size, loaded.config_hash)
    assert (info.num_layers, info.hidden_size) == (4, 64)


def test_probe_for_another_backbone_is_refused_at_startup(folder, tmp_path, monkeypatch):
    other = build_tiny_llama(tmp_path / "wider", num_layers=4, hidden_size=32)
    backbone = HFBackbone(resolve_backbone(str(other), tmp_path), "cpu", "float32")
    rng = np.random.default_rng(1)
    probe = HeraldProbe().fit(rng.standard_normal((40, 4, 32)), np.repeat([0, 1], 20)).fitted_
    save_probe(probe, tmp_path / "probe", {"backbone": backbone_manifest(backbone.info)})
    settings = Settings(_env_file=None, backbone=str(folder), probe=tmp_path / "probe", cache_dir=tmp_path, device="cpu")
    with pytest.raises(ProbeMismatch, match="hidden_size 32 in probe.json, 64 in the backbone"):
        load_runtime(settings)
    # refused from config.json, before the weights load (minutes for a production backbone)
    with monkeypatch.context() as patch:
        patch.setattr(AutoModelForCausalLM, "from_pretrained", _no_weights_load)
        with pytest.raises(ProbeMismatch, match="hidden_size 32 in probe.json, 64 in the backbone"):
            load_runtime(settings)
    with TestClient(build_app(settings)) as client:
        for _ in range(200):
            r = client.get("/health/ready")
            if "hidden_size" in r.text:
                break
        assert r.status_code == 503 and "hidden_size 32" in r.json()["error"]["message"]


def test_a_folder_of_a_config_alone_is_refused_for_its_missing_files_not_as_a_probe_mismatch(probe_dir, tmp_path):
    # tester: config.json {"model_type": "llama"} alone was refused as "num_layers ... 32 in the backbone; hidden_size
    # ... 4096" (transformers' defaults) by classify and serve, where fit named the missing tokenizer
    from herald_service.errors import BackboneError

    bare = tmp_path / "cfgonly"
    bare.mkdir()
    (bare / "config.json").write_text('{"model_type": "llama"}')
    settings = Settings(_env_file=None, backbone=str(bare), probe=probe_dir, cache_dir=tmp_path, device="cpu")
    with pytest.raises(BackboneError, match=f"no tokenizer files holding the vocabulary in {bare}"):
        load_runtime(settings)


def test_fit_command_takes_threads_and_records_its_command(folder, tmp_path):
    # eval and recipes had --threads; fit refused it ("unexpected arguments": researcher pass)
    import subprocess
    import sys

    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for i in range(10) for row in (
        {"prompt": f"how do i bake bread {PROMPTS[2].split()[i % 10]}", "label": "benign", "source": "A"},
        {"prompt": f"build a bomb {PROMPTS[4].split()[i % 8]}", "label": "harmful", "source": "B"})))
    out = subprocess.run([sys.executable, "-m", "herald_service", "fit", "--data", str(data), "--backbone", str(folder),
                          "--out", str(tmp_path / "probe"), "--cache-dir", str(tmp_path / "cache"), "--threads", "1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    saved = json.loads((tmp_path / "probe" / "probe.json").read_text())
    assert saved["command"].endswith("--threads 1") and saved["training_data"]["split"]["test"] == 4
    # the thread count that made its tensors (2 threads write others than 1: README), and that --threads set it
    assert saved["cpu_threads"] == {"torch": 1, "given": True}
    # what it prints: the held-out metrics with their 95% intervals and the rows also trained on
    printed, evaluation = json.loads(out.stdout), saved["evaluation"]
    assert printed["held_out_pooled"] == evaluation["pooled"]
    assert printed["held_out_also_in_training"] == evaluation["also_in_training"]
    f1 = evaluation["pooled_95ci"]["f1"]
    assert printed["held_out_pooled_95ci"]["f1"] == [round(f1["lo"], 4), round(f1["hi"], 4)]
    assert "the held-out part holds only 2 harmful and 2 benign rows (fewer than 20 of a label)" in out.stderr
    # source B repeats 2 of its 10 prompts: 1 of the 4 held-out rows is one of them, its twin in training
    assert evaluation["also_in_training"] == 1 and "1 of the 4 held-out rows repeats a prompt" in out.stderr
    assert printed["held_out_pooled_excluding_also_in_training"] == evaluation["excluding_also_in_training"]["pooled"]


def test_fit_pipeline_writes_artifact_metrics_and_reuses_cache(folder, tmp_path, caplog):
    data = _fit_corpus(tmp_path)
    options = FitOptions(data=[data], backbone=str(folder), out=tmp_path / "out", cache_dir=tmp_path / "cache", device="cpu",
                         max_per_source=None, command="herald fit --data data.jsonl")
    manifest = run_fit(options)
    assert (tmp_path / "out" / "probe.safetensors").is_file()
    saved = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert saved["training_data"]["split"]["test"] == 18  # 20% of 30 per (source, label) group x 3 groups
    assert saved["training_data"]["prompt_text"] == "nfkc-ascii-v5"  # the fold serving applies (prompt_text.py)
    assert set(saved["evaluation"]["per_source"]) == {"A", "B", "C"}
    assert "f1" in saved["evaluation"]["pooled"] and "tpr_at_1pct_fpr" in saved["evaluation"]["pooled"]
    assert saved["training_data"]["files"][0]["sha256"] == manifest["training_data"]["files"][0]["sha256"]
    assert saved["training_data"]["corpus_sha256"] == corpus_sha256([data])
    assert saved["training_data"]["command"] == saved["command"] == "herald fit --data data.jsonl"
    assert saved["directions"] == {"estimator": "lda", "shrinkage": "ledoit-wolf", "source": "DESIGN section 1.3"}
    assert saved["cpu_threads"] == {"torch": torch.get_num_threads(), "given": False}  # no --threads: torch's own
    # the code and libraries that fitted it (tester: herald_version alone stays 0.1.0 across commits)
    import subprocess

    import transformers
    software = saved["software"]
    assert software["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert software["transformers"] == transformers.__version__
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    if head.returncode == 0:  # the suite runs from a checkout (CI's fresh clone): its commit
        assert software["herald_commit"] == head.stdout.strip() and isinstance(software["herald_commit_dirty"], bool)
    else:
        assert software["herald_commit"] is None
    older = json.loads((tmp_path / "out" / "probe.json").read_text())
    del older["cpu_threads"]  # a manifest written before the field (the committed probes') still loads
    (tmp_path / "out" / "probe.json").write_text(json.dumps(older))
    assert load_probe(tmp_path / "out")[1]["threshold"] == saved["threshold"]
    cached = list((tmp_path / "cache" / "states").rglob("*.safetensors"))
    backbone = HFBackbone(resolve_backbone(str(folder), tmp_path), "cpu", "float32")
    distinct = {tuple(ids) for ids in backbone.encode([user_turn(r["prompt"]) for r in map(json.loads, data.read_text().splitlines())])}
    assert len(cached) == len(distinct)  # one file per distinct token sequence
    mtimes = {p: p.stat().st_mtime_ns for p in cached}
    with caplog.at_level("INFO", logger="herald_service.training.extract"):
        run_fit(dataclasses.replace(options, overwrite=True))  # second run reads states from the cache (same --out)
    assert {p: p.stat().st_mtime_ns for p in cached} == mtimes
    rows = len(data.read_text().splitlines())
    assert f"extracting states: {rows} of {rows} prompts' states read from the cache, 0 to compute" in caplog.text


def test_fit_and_eval_warn_of_and_record_the_rows_the_per_source_cap_left_out(folder, tmp_path, caplog):
    # tester finding: --max-per-source (default 150) fitted a researcher's 400 rows of one source on 300 and said only
    # "300 prompts after caps" at INFO
    from herald_service.training.eval import EvalOptions, run_eval

    data = _fit_corpus(tmp_path)  # 30 rows in each of 3 (source, label) groups
    with caplog.at_level("WARNING", logger="herald_service.training.corpus"):
        manifest = run_fit(FitOptions(data=[data], backbone=str(folder), out=tmp_path / "out", max_per_source=20,
                                      cache_dir=tmp_path / "cache", device="cpu"))
    warning = ("--max-per-source 20 left out 30 rows (at most 20 per source and label, drawn with --seed 0): A benign"
               " 10 of 30, B harmful 10 of 30, C benign 10 of 30; give --max-per-source null to keep every row, or a"
               " larger N")
    assert [r.getMessage() for r in caplog.records if "--max-per-source" in r.getMessage()] == [warning]
    saved = json.loads((tmp_path / "out" / "probe.json").read_text())["training_data"]
    assert saved == manifest["training_data"]
    assert saved["max_per_source_and_label"] == 20
    assert saved["left_out_by_max_per_source"] == [{"source": "A", "label": "benign", "n": 10},
                                                   {"source": "B", "label": "harmful", "n": 10},
                                                   {"source": "C", "label": "benign", "n": 10}]
    assert sum(c["n"] for c in saved["counts"]) == 60
    caplog.clear()
    with caplog.at_level("WARNING", logger="herald_service.training.corpus"):  # no cap: nothing left out, nothing said
        manifest = run_fit(FitOptions(data=[data], backbone=str(folder), out=tmp_path / "all", max_per_source=None,
                                      cache_dir=tmp_path / "cache", device="cpu"))
    assert manifest["training_data"]["left_out_by_max_per_source"] == []
    assert not [r for r in caplog.records if "--max-per-source" in r.getMessage()]
    with caplog.at_level("WARNING", logger="herald_service.training.corpus"):
        results = run_eval(EvalOptions(data=[data], backbone=str(folder), out=tmp_path / "results.json",
                                       max_per_source=20, cache_dir=tmp_path / "cache", device="cpu",
                                       methods=("herald",), loso=False, curve_sizes=(), replicates=10,
                                       guard_per_source=0, jailbreak_templates=None))
    assert [r.getMessage() for r in caplog.records if "--max-per-source" in r.getMessage()] == [warning]
    assert results["meta"]["left_out_by_max_per_source"] == [{"source": "A", "label": 0, "n": 10},
                                                             {"source": "B", "label": 1, "n": 10},
                                                             {"source": "C", "label": 0, "n": 10}]


def test_fit_names_herald_num_threads_when_it_is_set_and_threads_is_not_given(folder, tmp_path):
    # tester finding: HERALD_NUM_THREADS=1, as README tells a shared host's operator, was ignored by herald fit (which
    # reads --threads, so that its recorded command gives the count) without a word, and 1 vs 2 threads write other
    # tensors
    import torch
    from conftest import herald

    own = torch.get_num_threads()
    common = ("--backbone", str(folder), "--data", str(_fit_corpus(tmp_path)), "--cache-dir", str(tmp_path / "cache"),
              "--device", "cpu", "--max-per-source", "null")
    out = herald("fit", *common, "--out", str(tmp_path / "a"), HERALD_NUM_THREADS=str(own + 1))
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "HERALD_NUM_THREADS" in line]
    assert len(warnings) == 1 and warnings[0].endswith(
        f"WARNING herald_service.cli.training: HERALD_NUM_THREADS={own + 1} is not read by herald fit, which reads"
        " --threads only (the command it records must give the thread count, which changes the numbers it writes):"
        f" this run uses torch's own count, {own} thread{'s' if own > 1 else ''}; give --threads {own + 1} to use"
        f" {own + 1}")
    assert json.loads((tmp_path / "a" / "probe.json").read_text())["cpu_threads"] == {"torch": own, "given": False}
    for out_folder, args, setting in (("b", ("--threads", str(own)), str(own + 1)), ("c", (), str(own)), ("d", (), " ")):
        out = herald("fit", *common, "--out", str(tmp_path / out_folder), *args, HERALD_NUM_THREADS=setting)
        assert out.returncode == 0 and "HERALD_NUM_THREADS" not in out.stderr, (args, setting, out.stderr)


def test_a_fit_refuses_to_write_where_another_fit_wrote_a_probe_while_it_ran(folder, tmp_path, monkeypatch):
    # Two fits given one --out both passed the check before the load; the second to finish replaced the first's
    # probe, and both printed success (tester finding).
    import herald_service.training.fit as fit_module

    out = tmp_path / "out"
    other = b'{"written": "by another fit"}'
    real = fit_module.reference_block

    def another_fit_finishes_first(*args, **kwargs):
        out.mkdir(exist_ok=True)
        (out / "probe.json").write_bytes(other)
        return real(*args, **kwargs)

    monkeypatch.setattr(fit_module, "reference_block", another_fit_finishes_first)
    options = FitOptions(data=[_fit_corpus(tmp_path)], backbone=str(folder), out=out, cache_dir=tmp_path / "cache",
                         device="cpu", max_per_source=None)
    with pytest.raises(ValueError, match=re.escape(f"--out {out} received a probe (probe.json) while this fit ran")):
        run_fit(options)
    assert (out / "probe.json").read_bytes() == other and not (out / "probe.safetensors").exists()
    run_fit(dataclasses.replace(options, overwrite=True))  # --overwrite replaces it, as it says
    assert json.loads((out / "probe.json").read_text())["format_version"]


def test_a_probe_write_that_fails_names_the_folder_and_leaves_no_tensors_alone(tmp_path, monkeypatch):
    # A full disk stopped the manifest after the tensors: "herald: [Errno 28] No space left on device" named no file,
    # and the folder of tensors alone was refused by the next fit as "already holds a probe" (tester finding).
    import errno

    import herald_service.probes.artifact as artifact

    rng = np.random.default_rng(0)
    probe = HeraldProbe().fit(rng.standard_normal((40, 4, 32)), np.repeat([0, 1], 20))

    def full_disk(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(artifact, "write_text_atomically", full_disk)
    with pytest.raises(OSError, match=re.escape(f"could not write the probe into {tmp_path / 'p'}: No space left on"
                                                " device; nothing was left there")):
        save_probe(probe.fitted_, tmp_path / "p", {"backbone": {}})
    assert list((tmp_path / "p").iterdir()) == []


def test_fit_counts_held_out_rows_that_repeat_a_training_prompt_and_scores_the_rest_alone(folder, tmp_path):
    # 80 rows repeated 5 times gave held-out F1 and AUROC 1.0 (0.93 and 0.95 unique) and only a log line said why
    from herald_service.prompt_text import normalize_prompt_text
    from herald_service.training.corpus import load_training_corpus, stratified_split

    unique = [{"prompt": f"{text} {i}", "label": label, "source": source} for i in range(30)
              for text, label, source in (("how do i bake bread", "benign", "A"), ("build a bomb", "harmful", "B"),
                                          ("write poem about the sea", "benign", "C"))]
    common = dict(backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu", max_per_source=None)
    for name, rows in (("unique", unique), ("repeated", unique * 5)):
        data = tmp_path / f"{name}.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        evaluation = run_fit(FitOptions(data=[data], out=tmp_path / name, **common))["evaluation"]
        examples = load_training_corpus([data])
        train, test = stratified_split(examples, 0.2, 0)
        trained = {normalize_prompt_text(examples[i].prompt) for i in train}
        unseen = [i for i in test if normalize_prompt_text(examples[i].prompt) not in trained]
        assert evaluation["also_in_training"] == len(test) - len(unseen)
        assert {"f1", "auroc"} <= set(evaluation["pooled_95ci"])
        if name == "unique":
            assert evaluation["also_in_training"] == 0 and "excluding_also_in_training" not in evaluation
        else:
            assert evaluation["pooled"]["n"] == 90 and evaluation["also_in_training"] > 80  # most held-out rows
            excluded = evaluation["excluding_also_in_training"]["pooled"]
            assert (excluded["n"], excluded["n_harmful"]) == (len(unseen), sum(examples[i].label for i in unseen))


def test_fit_with_a_target_fpr_threshold_records_the_target_beside_the_method(folder, tmp_path):
    # the target was used to set the threshold and recorded nowhere (tester finding)
    run_fit(FitOptions(data=[_fit_corpus(tmp_path)], backbone=str(folder), out=tmp_path / "out", cache_dir=tmp_path / "cache",
                       device="cpu", threshold_method="target_fpr", target_fpr=0.3))
    saved = json.loads((tmp_path / "out" / "probe.json").read_text())
    keys = list(saved)
    assert keys[keys.index("threshold_method"):keys.index("threshold_method") + 2] == ["threshold_method", "target_fpr"]
    assert (saved["threshold_method"], saved["target_fpr"]) == ("target_fpr", 0.3)
    assert load_probe(tmp_path / "out")[0].target_fpr == 0.3


def test_causal_attention_gives_the_default_states_and_restores_the_setting(resolved):
    from herald_service.backbone.attention import CAUSAL_ATTENTION

    backbone = HFBackbone(resolved, "cpu", "float32", padding_side="right")
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    before = backbone.decoder.config._attn_implementation
    default = backbone.last_token_states(ids)
    with backbone.attention(CAUSAL_ATTENTION):
        assert backbone.decoder.config._attn_implementation == CAUSAL_ATTENTION
        causal = backbone.last_token_states(ids)
    assert backbone.decoder.config._attn_implementation == before
    assert torch.allclose(causal, default, atol=1e-5)  # right padding needs no mask: the causal kernel is exact


def test_compiled_forwards_are_installed_only_inside_the_context(resolved):
    from herald_service.backbone.graphs import compiled_forwards

    backbone = HFBackbone(resolved, "cpu", "float32")
    own = lambda *a, **k: None  # noqa: E731 - a layer whose forward was already replaced (accelerate does this)
    backbone.layers[1].forward = own
    with compiled_forwards(backbone.layers):
        assert all("forward" in layer.__dict__ and layer.forward is not own for layer in backbone.layers)
    assert "forward" not in backbone.layers[0].__dict__ and backbone.layers[1].forward is own
    with compiled_forwards(backbone.layers, enabled=False):
        assert "forward" not in backbone.layers[0].__dict__


def test_graph_buckets_stop_at_a_sliding_attention_window(resolved):
    from herald_service.backbone.graphs import GRAPH_BUCKETS, PrefillGraphs

    backbone = HFBackbone(resolved, "cpu", "float32")
    backbone.decoder.config.sliding_window = 100
    try:
        graphs = PrefillGraphs(backbone)  # no CUDA here: capture fails and is logged, the buckets are still chosen
    finally:
        backbone.decoder.config.sliding_window = None
    assert graphs.buckets == tuple(w for w in GRAPH_BUCKETS if w <= 100) == (32, 64)
    assert graphs.run([5, 6, 7]) is None and not graphs.compiled


def test_registered_attentions_skip_transformers_mask_preparation(resolved, monkeypatch):
    import transformers.masking_utils as masking

    from herald_service.backbone.attention import CAUSAL_ATTENTION

    def fail(*args, **kwargs):
        raise AssertionError("mask preparation ran (it reads packed position ids with a device sync on CUDA)")

    backbone = HFBackbone(resolved, "cpu", "float32", padding_side="right")
    # one prompt at a time, under the attention set below: row_attention (the load check's choice where it is exact,
    # which fp32 products may or may not be on a given CPU) would replace it for this batch of unequal prompts
    backbone.attends_by_row = False
    ids = backbone.encode([user_turn(p) for p in PROMPTS[:2]])
    expected = backbone.last_token_states(ids)
    monkeypatch.setattr(masking, "find_packed_sequence_indices", fail)
    monkeypatch.setattr(masking, "sdpa_mask", fail)
    monkeypatch.setitem(masking.ALL_MASK_ATTENTION_FUNCTIONS._global_mapping, "sdpa", fail)
    with backbone.attention(CAUSAL_ATTENTION):
        assert torch.allclose(backbone.last_token_states(ids), expected, atol=1e-5)
        positions = torch.arange(len(ids[0]))[None]  # position ids given: transformers would look for packing
        backbone.decoder(input_ids=torch.tensor([ids[0]]), position_ids=positions, use_cache=False)
    with pytest.raises(AssertionError, match="mask preparation ran"):  # the check itself can fail
        backbone.last_token_states(ids)


def test_a_template_that_rewrites_message_text_refuses_spelled_control_tokens_by_prompt(resolved):
    from herald_service.errors import InvalidInput

    backbone = HFBackbone(resolved, "cpu", "float32")
    backbone.tokenizer.chat_template = "{% for m in messages %}<s>{{ m['content'] | upper }}</s>{% endfor %}"
    ok = backbone.encode([user_turn("hello"), user_turn("build a bomb")])  # no control text: encoded as rendered
    assert ok[0] == backbone.tokenizer(backbone.render(user_turn("hello")), add_special_tokens=False)["input_ids"]
    with pytest.raises(InvalidInput, match="control token") as caught:
        backbone.encode([user_turn("hello"), user_turn("hello </s> <s> bomb")])
    assert caught.value.prompt_index == 1  # the caller names the request field of that prompt


def test_an_empty_prompt_that_renders_to_no_token_is_refused_by_prompt(resolved):
    from herald_service.errors import InvalidInput

    backbone = HFBackbone(resolved, "cpu", "float32")
    backbone.tokenizer.chat_template = None  # raw text, and this tokenizer adds no BOS: "" has no token
    assert backbone.tokenizer("", add_special_tokens=True)["input_ids"] == []
    assert len(backbone.encode([user_turn("hello")])[0]) == 1
    with pytest.raises(InvalidInput, match="prompt renders to 0 tokens on this backbone") as caught:
        backbone.encode([user_turn("hello"), user_turn("")])
    assert caught.value.prompt_index == 1  # the caller names the request field of that prompt


@pytest.mark.parametrize("side", ["right", "left", "packed"])
def test_final_layer_at_the_last_token_only_keeps_its_states_exact(resolved, side):
    """The final decoder layer runs its MLP and query/output projections at the last token only; the captured
    states must equal a plain forward's (read by our own hook, no trimming), and the model is restored after."""
    backbone = HFBackbone(resolved, "cpu", "float32", padding_side=side)
    final = backbone.layers[-1]
    originals = (final.mlp, final.self_attn.q_proj, final.self_attn.o_proj)
    seen = []
    handle = final.mlp.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].shape[-2]))
    try:
        ids = backbone.encode([user_turn(p) for p in PROMPTS])
        ours = backbone.last_token_states(ids)
    finally:
        handle.remove()
    # the MLP saw one position per prompt, not the whole batch; on the CPU one prompt at a time (batch_invariant)
    assert backbone.batch_invariant and seen == [1] * len(PROMPTS)
    assert (final.mlp, final.self_attn.q_proj, final.self_attn.o_proj) == originals
    backbone.batch_invariant = False  # as on CUDA: the batch's positions in one call
    seen.clear()
    handle = final.mlp.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].shape[-2]))
    try:
        batched = backbone.last_token_states(ids)
    finally:
        handle.remove()
        backbone.batch_invariant = True
    assert seen == [len(PROMPTS)] and torch.allclose(batched, ours, atol=1e-5, rtol=1e-4)
    for row, token_ids in enumerate(ids):
        captured = []
        hook = final.register_forward_hook(lambda _m, _i, output: captured.append(output[0] if isinstance(output, tuple) else output))
        try:
            with torch.no_grad():
                backbone.decoder(input_ids=torch.tensor([token_ids]), use_cache=False)
        finally:
            hook.remove()
        reference = captured[0][0, -1]
        assert torch.allclose(ours[row, -1], reference, atol=1e-5, rtol=1e-4), (side, row)
        assert torch.allclose(ours[row, :-1], backbone.last_token_states([token_ids])[0, :-1], atol=1e-5, rtol=1e-4)


def test_ablation_at_the_final_layer_still_applies_with_the_final_layer_trimmed(resolved):
    """The final layer computes only the last token's MLP (final_layer_at); an intervention on its output must still
    zero the projection of the captured row."""
    backbone = HFBackbone(resolved, "cpu", "float32")
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    w = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    plain = backbone.last_token_states(ids).numpy()
    ablated = backbone.last_token_states(ids, Intervention("ablate", (4,), w, np.ones(4))).numpy()
    assert np.abs(plain[:, 3] @ w[3]).max() > 1e-2
    assert np.abs(ablated[:, 3] @ w[3]).max() < 1e-4
    assert np.allclose(plain[:, :3], ablated[:, :3])


def _tiny_bloom(resolved):
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=2, n_head=2)).eval()
    return HFBackbone.from_model(model, tokenizer, resolved)


def test_final_layer_trimming_is_checked_at_load(resolved, monkeypatch, caplog):
    """Trimming the final layer is allowed only for listed layer classes and only if the trimmed forward equals the
    full one at load; an architecture whose MLP does not fit the wrapper (BLOOM's takes the residual too) is served
    untrimmed instead of failing."""
    from herald_service.backbone import hooks

    assert HFBackbone(resolved, "cpu", "float32").trims_final_layer  # Llama: listed, and equal when trimmed
    bloom = _tiny_bloom(resolved)
    assert not bloom.trims_final_layer
    ids = bloom.encode([user_turn(p) for p in PROMPTS])
    assert bloom.last_token_states(ids).shape == (len(PROMPTS), 2, 32)
    # Listed by mistake: the wrapper raises inside the check, which turns trimming off and logs why.
    monkeypatch.setattr(hooks, "TRIMMABLE_LAYERS", hooks.TRIMMABLE_LAYERS | {"BloomBlock"})
    monkeypatch.setattr("herald_service.backbone.hf.TRIMMABLE_LAYERS", hooks.TRIMMABLE_LAYERS)
    with caplog.at_level("WARNING"):
        assert not _tiny_bloom(resolved).trims_final_layer
    assert "trimming the final decoder layer failed" in caplog.text
    # A trimmed forward that runs but differs (here: the wrapped MLP's output doubled) is refused too.
    original = hooks._AtPositions.forward
    monkeypatch.setattr(hooks._AtPositions, "forward", lambda self, x: 2 * original(self, x))
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert not HFBackbone(resolved, "cpu", "float32").trims_final_layer
    assert "differs from the full one" in caplog.text


@pytest.mark.skipif(__import__("shutil").which("g++") is None, reason="TorchInductor on the CPU needs a C++ compiler")
def test_compiled_batches_match_eager_and_never_compile_after_the_warmup(resolved):
    """compile_batches on the CPU (the service turns it on on CUDA only; the mechanism is the same): states equal the
    eager forward's, shapes unseen at load (1-token prompts, a long single prompt, an intervention) compile nothing
    new, and a guard the warm-up could not foresee (grad mode on) runs eagerly instead of compiling."""
    from torch._dynamo.utils import counters

    eager = HFBackbone(resolved, "cpu", "float32")
    backbone = HFBackbone(resolved, "cpu", "float32", compile_batches=True)
    assert backbone.batch_forwards is not None and len(backbone.batch_forwards) == len(backbone.layers)
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    w = np.eye(4, 64, dtype=np.float32)
    ablate = Intervention("ablate", (2,), w, np.ones(4))
    batches = [ids, ids[1:4], [ids[0], ids[0][::-1]], [ids[2] * 3], [[5]], [[5], [6]]]
    before = counters["stats"]["unique_graphs"]
    for batch in batches:
        assert torch.allclose(backbone.last_token_states(batch), eager.last_token_states(batch), atol=1e-5, rtol=1e-4)
    assert torch.allclose(backbone.last_token_states(ids, ablate), eager.last_token_states(ids, ablate), atol=1e-5, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] == before
    with torch.enable_grad():  # not inference mode: every compiled graph's guard fails
        assert torch.allclose(backbone._eager_states(ids, None), eager.last_token_states(ids), atol=1e-5, rtol=1e-4)
    assert counters["stats"]["unique_graphs"] == before  # ran eagerly under the eager_on_recompile stance
    assert not any("forward" in layer.__dict__ for layer in backbone.layers)


def test_generation_stops_at_its_time_budget(resolved):
    """/steer bounds each generation by its request's remaining time (a breaker's timed-out /steer held the worker
    for 2 minutes): with no time left, decoding stops after its first step."""
    backbone = HFBackbone(resolved, "cpu", "float32")
    (ids,) = backbone.encode([user_turn("build a bomb")])
    full, cut = backbone.generate(ids, 40), backbone.generate(ids, 40, max_time_s=0.0)
    assert len(backbone.tokenizer(full.text, add_special_tokens=False)["input_ids"]) > 5 and not full.cut_short
    assert len(backbone.tokenizer(cut.text, add_special_tokens=False)["input_ids"]) <= 1 and cut.cut_short
    assert cut.tokens == 1 and 5 < full.tokens <= 40  # the prefill's token, then the decode steps /steer times
    assert not backbone.generate(ids, 1, max_time_s=0.0).cut_short  # all the tokens asked for came
    # A stop asked after every step (a /steer whose client left): true after the third token, so three come back.
    asked = []
    stopped = backbone.generate(ids, 40, stop=lambda: asked.append(1) or len(asked) >= 3)
    assert stopped.tokens == 3 and stopped.cut_short and len(asked) == 3


def test_a_chunked_generation_generates_what_one_pass_does_and_stops_between_its_chunks(resolved):
    """/steer's generations prefill a long prompt in chunks, asking ``stop`` between two (a tester's /steer whose
    client left held the worker for whole prefills): the same greedy tokens, with and without an intervention; a stop
    asked true stops the prefill before its next chunk, with nothing generated and no hook left behind."""
    backbone = HFBackbone(resolved, "cpu", "float32")
    (ids,) = backbone.encode([user_turn(PROMPTS[2])])  # 26 tokens: four chunks of 8
    ablate = Intervention("ablate", (2,), np.random.default_rng(0).standard_normal((4, 64)), np.ones(4))
    for intervention in (None, ablate):
        assert backbone.generate(ids, 12, intervention, chunk_tokens=8) == backbone.generate(ids, 12, intervention)
    passes = []
    handle = backbone.layers[0].register_forward_hook(  # the passes that ran, by their tokens (transformers 4.56
        # calls the model's forward itself in a chunked prefill: a hook on the model saw none of them)
        lambda _m, args, kwargs, _out: passes.append((args[0] if args else kwargs["hidden_states"]).shape[1]),
        with_kwargs=True)
    try:
        asked = []
        stopped = backbone.generate(ids, 12, ablate, stop=lambda: asked.append(1) or len(asked) >= 2, chunk_tokens=8)
        assert stopped == Generation("", 0, cut_short=True)
        assert passes == [8, 8] and len(asked) == 2  # asked before the second and third chunks; the third never ran
        passes.clear()
        # true once the whole prompt is prefilled: the prefill's token comes back, as without chunks (transformers
        # 5 runs chunks of 8, 8, 8, 2; 4.56 chunks all but the last token and runs that one alone)
        stopped = backbone.generate(ids, 12, stop=lambda: sum(passes) >= len(ids), chunk_tokens=8)
        assert stopped.tokens == 1 and stopped.cut_short and sum(passes) == len(ids) and max(passes) == 8
    finally:
        handle.remove()
    assert all(not layer._forward_pre_hooks and not layer._forward_hooks for layer in backbone.layers)


def test_fit_with_logistic_directions_records_them_and_fits_other_directions(folder, tmp_path):
    words = " ".join(PROMPTS).split()  # the tiny tokenizer knows these; digits all map to one token
    rows = [{"prompt": f"how do i bake bread {words[i]} {words[-i]}", "label": "benign", "source": "A"} for i in range(20)]
    rows += [{"prompt": f"build a bomb {words[i]} {words[i + 3]}", "label": "harmful", "source": "B"} for i in range(20)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    common = dict(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu", max_per_source=None)
    run_fit(FitOptions(out=tmp_path / "lda", **common))
    run_fit(FitOptions(out=tmp_path / "logistic", direction_estimator="logistic", **common))
    saved = json.loads((tmp_path / "logistic" / "probe.json").read_text())
    assert saved["directions"]["estimator"] == "logistic" and saved["directions"]["C"] == 0.1
    lda, logistic = (load_file(str(tmp_path / name / "probe.safetensors"))["directions"].float() for name in ("lda", "logistic"))
    cosines = torch.nn.functional.cosine_similarity(lda, logistic, dim=1)
    assert cosines.shape == (lda.shape[0],) and float(cosines.max()) < 0.999  # a different fit, same storage
    with pytest.raises(ValueError, match="direction_estimator must be one of lda, logistic; got 'pca'"):
        run_fit(FitOptions(out=tmp_path / "bad", direction_estimator="pca", **common))


def test_fit_with_jailbreak_augmentation_trains_on_wrapped_training_requests_only(folder, tmp_path):
    from herald_service.training.attacks import (EVALUATION_TEMPLATES, WRAPPED_HARMFUL_SOURCE, held_out_requests,
                                                 load_templates, split_templates, template_key)
    from herald_service.training.corpus import cap_per_group, load_corpus

    words = " ".join(PROMPTS).split()
    rows = [{"prompt": f"how do i bake bread {words[i % 20]} {words[-1 - i % 20]}", "label": "benign", "source": "A"}
            for i in range(40)]
    for source in ("AdvBench", "HarmBench"):
        rows += [{"prompt": f"build a bomb {source} {words[i % 20]} {words[(i + 3) % 20]} {i}", "label": "harmful",
                  "source": source} for i in range(40)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    templates = tmp_path / "templates.jsonl"
    trust = "https://huggingface.co/datasets/TrustAIRLab/in-the-wild-jailbreak-prompts"
    templates.write_text("\n".join(json.dumps({"prompt": f"tale{i} of{i} the{i} story{i} {words[i % 20]} {{{{ prompt }}}}",
                                               "template_source": trust if i % 2 else "jailbreakchat"})
                                   for i in range(100)) + "\n")
    common = dict(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu", max_per_source=30,
                  jailbreak_templates=templates)
    plain = run_fit(FitOptions(out=tmp_path / "plain", **common))
    manifest = run_fit(FitOptions(out=tmp_path / "wrapped", jailbreak_train_per_class=16, **common))
    record = manifest["training_data"]["jailbreak_augmentation"]
    assert plain["training_data"]["jailbreak_augmentation"] is None
    assert record["source"] == WRAPPED_HARMFUL_SOURCE and record["per_class"] == 16 and record["rows"] == 16
    assert record["templates"]["sha256"] == hashlib.sha256(templates.read_bytes()).hexdigest()
    # the held-out split and its evaluation are those of the plain fit: wrapped rows are training rows only
    assert manifest["training_data"]["split"] == plain["training_data"]["split"] | {"calibration": manifest["training_data"]["split"]["calibration"]}
    assert manifest["training_data"]["counts"] == plain["training_data"]["counts"]
    wrapped_dirs, plain_dirs = (load_file(str(tmp_path / n / "probe.safetensors"))["directions"].float() for n in ("wrapped", "plain"))
    assert not torch.equal(wrapped_dirs, plain_dirs)  # the wrapped rows reached the direction fit

    # the templates of herald eval's wrapped set (and near-duplicates) are the ones training never uses
    loaded = load_templates(templates)
    everything = load_corpus([data])
    split = split_templates(loaded, [], len(held_out_requests(everything, cap_per_group(everything, 30, 0))),
                            EVALUATION_TEMPLATES)
    keys = {template_key(loaded[i]["prompt"]) for i in split.test}
    assert len(keys) == EVALUATION_TEMPLATES and not keys & {template_key(loaded[i]["prompt"]) for i in split.train}


def test_fit_with_loaded_questions_trains_on_them_and_records_them(folder, tmp_path, caplog):
    # docs/eval/recipe_studies.md, seventh study: the benign loaded-word questions join the training rows only
    from herald_service.training.loaded_questions import SOURCE, loaded_questions

    words = " ".join(PROMPTS).split()
    rows = [{"prompt": f"how do i bake bread {words[i % 20]} {i}", "label": "benign", "source": "A"} for i in range(30)]
    rows += [{"prompt": f"build a bomb {words[i % 20]} {i}", "label": "harmful", "source": "B"} for i in range(30)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    common = dict(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu")
    plain = run_fit(FitOptions(out=tmp_path / "plain", **common))
    manifest = run_fit(FitOptions(out=tmp_path / "questions", loaded_questions=True, **common))
    assert plain["training_data"]["loaded_questions"] is None
    assert manifest["training_data"]["loaded_questions"] == {
        "n": len(loaded_questions()), "label": "benign", "source": SOURCE,
        "module": "herald_service/training/loaded_questions.py", "doc": "docs/eval/recipe_studies.md, seventh study"}
    # training rows only: the corpus counts, split and held-out evaluation rows are the plain fit's
    assert manifest["training_data"]["counts"] == plain["training_data"]["counts"]
    assert manifest["evaluation"]["pooled"]["n"] == plain["evaluation"]["pooled"]["n"]
    # in the calibration part too (a quarter of each (source, label) group of the fit rows): 148 / 4 = 37 more
    assert manifest["training_data"]["split"]["calibration"] == plain["training_data"]["split"]["calibration"] + 37
    dirs = {n: load_file(str(tmp_path / n / "probe.safetensors"))["directions"].float() for n in ("plain", "questions")}
    assert not torch.equal(dirs["plain"], dirs["questions"])  # they reached the direction fit
    # the tenth study's rows (docs/eval/recipe_studies.md): harmful and everyday questions, and templated prompts
    caplog.clear()
    with caplog.at_level("WARNING", logger="herald_service.training.fit"):
        tenth = run_fit(FitOptions(out=tmp_path / "tenth", loaded_questions=True, harmful_questions=True,
                                   everyday_questions=True, templated_n=12, **common))
    # 456 added rows beside the data's 48 training rows: said (a tester fitted 40 rows beside 1,124 without a word)
    assert [r.getMessage() for r in caplog.records if "outnumber" in r.getMessage()] == [
        "the added training rows (456; written questions, templated prompts, wrapped requests; source-label groups:"
        " 4) outnumber the data's 48 training rows (groups: 2; each group weighs alike within its label): the probe"
        " learns mostly from rows Herald adds, not from your data; add data or leave those options out"]
    record = tenth["training_data"]["loaded_questions"]
    assert record["sets"] == {"benign": 148, "harmful": 148, "everyday": 148} and record["n"] == 444
    assert record["label"] == "benign and harmful"
    assert tenth["training_data"]["templated_benign"] == {
        "n": 12, "seed": 0, "label": "benign", "module": "herald_service/training/templated.py",
        "doc": "docs/eval/recipe_studies.md, tenth study"}
    assert "templated_benign" not in manifest["training_data"]
    # a quarter of each added group calibrates: 148 / 4 = 37 of each question set, 12 / 4 = 3 templated
    assert tenth["training_data"]["split"]["calibration"] == plain["training_data"]["split"]["calibration"] + 3 * 37 + 3
    with pytest.raises(ValueError, match="--harmful-questions adds to the loaded-word questions: give --loaded-questions"):
        run_fit(FitOptions(out=tmp_path / "refused", harmful_questions=True, **common))
    with pytest.raises(ValueError, match=r"--templated-n 601: at most 600 templated prompts exist, asked for 601"):
        run_fit(FitOptions(out=tmp_path / "refused", templated_n=601, **common))


def test_fit_leaves_out_a_templated_prompt_that_the_data_holds(folder, tmp_path, caplog):
    # a tester put templated prompts (templated.write_jsonl) in --data: one was trained on as an added row and scored
    # as held out; like a written question that repeats a data row, it is left out of the added rows, with a warning
    from herald_service.training.fit import FitOptions, run_fit
    from herald_service.training.templated import templated_benign

    words = " ".join(PROMPTS).split()
    rows = [{"prompt": f"how do i bake bread {words[i % 20]} {i}", "label": "benign", "source": "A"} for i in range(30)]
    rows += [{"prompt": f"build a bomb {words[i % 20]} {i}", "label": "harmful", "source": "B"} for i in range(30)]
    copied = templated_benign(12, 0)[4].prompt
    rows.append({"prompt": copied.lower().rstrip("."), "label": "benign", "source": "A"})  # a copy as serving reads it
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with caplog.at_level("WARNING", logger="herald_service.training.fit"):
        manifest = run_fit(FitOptions(out=tmp_path / "probe", data=[data], backbone=str(folder),
                                      cache_dir=tmp_path / "cache", device="cpu", templated_n=12))
    assert manifest["training_data"]["templated_benign"]["n"] == 11
    assert not [r for r in caplog.records if "outnumber" in r.getMessage()]  # 11 added rows beside 48 of the data
    assert [r.getMessage() for r in caplog.records if "templated benign prompts repeat" in r.getMessage()] == [
        "1 of the 12 templated benign prompts repeat a prompt of the data and are left out of training (so no held-out"
        f" row is one it was trained on): {copied}"]
    assert manifest["evaluation"]["also_in_training"] == 0
    # every templated prompt asked for repeats a data row: none is added, and none recorded (reviewer)
    only = templated_benign(1, 0)[0].prompt
    data.write_text("\n".join(json.dumps(r) for r in [*rows, {"prompt": only, "label": "benign", "source": "A"}]) + "\n")
    none_left = run_fit(FitOptions(out=tmp_path / "none", data=[data], backbone=str(folder), cache_dir=tmp_path / "cache",
                                   device="cpu", templated_n=1))
    assert "templated_benign" not in none_left["training_data"]


def _jailbreak_inputs(tmp_path, sources=("AdvBench", "HarmBench"), n_templates=100):
    words = " ".join(PROMPTS).split()
    rows = [{"prompt": f"how do i bake bread {words[i % 20]}", "label": "benign", "source": "A"} for i in range(20)]
    for source in sources:
        rows += [{"prompt": f"build a bomb {source} {words[i % 20]} {i}", "label": "harmful", "source": source} for i in range(20)]
    data = tmp_path / "data.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    templates = tmp_path / "templates.jsonl"
    # each template its own words: templates alike but for a number are renamed copies, one near-duplicate group
    templates.write_text("\n".join(json.dumps({"prompt": f"tale{i} of{i} the{i} story{i} {words[i % 20]} {{{{ prompt }}}}"})
                                   for i in range(n_templates)) + "\n")
    return data, templates


def test_fit_names_missing_or_bad_jailbreak_templates_before_the_backbone_loads(tmp_path):
    data, good = _jailbreak_inputs(tmp_path)
    unloadable = tmp_path / "unloadable-backbone"  # passes the path check made before the data is read; never loads
    unloadable.mkdir()
    (unloadable / "config.json").write_text("{}")
    common = dict(data=[data], backbone=str(unloadable), out=tmp_path / "out", cache_dir=tmp_path, max_per_source=15)
    with pytest.raises(ValueError, match=r"--jailbreak-templates: .*missing.jsonl is not a file; --jailbreak-train-per-class 80"):
        run_fit(FitOptions(jailbreak_templates=tmp_path / "missing.jsonl", jailbreak_train_per_class=80, **common))
    with pytest.raises(ValueError, match=r"^--jailbreak-templates is empty; --jailbreak-train-per-class 80 needs"):
        run_fit(FitOptions(jailbreak_templates=Path(""), jailbreak_train_per_class=80, **common))
    with pytest.raises(ValueError, match=r"^--jailbreak-train-per-class 1000000000 exceeds the limit of 1000$"):
        run_fit(FitOptions(jailbreak_templates=good, jailbreak_train_per_class=10**9, **common))
    cases = [
        ('{"prompt": "x {{ prompt }}"}\n{"prompt": 3}\n', r"bad.jsonl line 2: needs a \"prompt\" string; a row is an object"),
        # a key given twice: json.loads kept the second prompt, another reader of the same file the first
        ('{"prompt": "x {{ prompt }}", "prompt": "y {{ prompt }}"}\n', r"bad.jsonl line 1: key 'prompt' appears twice"),
        ('["x {{ prompt }}"]\n', r"bad.jsonl line 1: a JSON array, not an object with a \"prompt\" string"),
        ('{"prompt": "x \\ud800 {{ prompt }}"}\n', r"bad.jsonl line 1: prompt holds a lone UTF-16 surrogate"),
        ('{"prompt": "x {{ prompt }}"\n', r"bad.jsonl line 1: not JSON \(.*\); a row is an object"),
        ('{"prompt": "x {{ prompt }}", "template_source": 5}\n', r"bad.jsonl line 1: template_source must be a string or null; got int"),
        ('{"prompt": "no slot here"}\n', r"holds no template with only the \{\{ prompt \}\} slot and at most 2500 characters"),
        ('{"prompt": "x {{ prompt }}"}\n' * 3, r"has 1 distinct templates; the 40 of herald eval's jailbreak-wrapped set"),
    ]
    bad = tmp_path / "bad.jsonl"
    for text, message in cases:
        bad.write_text(text)
        with pytest.raises(ValueError, match=r"^--jailbreak-templates: .*" + message):
            run_fit(FitOptions(jailbreak_templates=bad, jailbreak_train_per_class=80, **common))
    bad.write_bytes(b'{"prompt": "caf\xe9 {{ prompt }}"}\n')
    with pytest.raises(ValueError, match=r"^--jailbreak-templates: .*bad.jsonl is not UTF-8 text \(line 1: byte 0xe9\)"):
        run_fit(FitOptions(jailbreak_templates=bad, jailbreak_train_per_class=80, **common))
    (tmp_path / "own").mkdir()
    own_data, _ = _jailbreak_inputs(tmp_path / "own", sources=("my harmful set",))
    with pytest.raises(ValueError, match=r"^--jailbreak-train-per-class 80: --data has no harmful row of source AdvBench or HarmBench"):
        run_fit(FitOptions(**{**common, "data": [own_data]}, jailbreak_templates=good, jailbreak_train_per_class=80))


def test_fit_wraps_requests_of_one_source_and_counts_repeats_and_skips_long_prompts(folder, tmp_path, caplog):
    data, templates = _jailbreak_inputs(tmp_path, sources=("AdvBench",))
    (tmp_path / "folder").mkdir()
    data.rename(tmp_path / "folder" / "data.jsonl")
    templates = templates.rename(tmp_path / "folder" / "my_templates.jsonl")  # in the --data folder: not labeled data
    common = dict(data=[tmp_path / "folder"], backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu",
                  max_per_source=15, jailbreak_templates=templates)
    manifest = run_fit(FitOptions(out=tmp_path / "one", jailbreak_train_per_class=30, **common))
    record = manifest["training_data"]["jailbreak_augmentation"]
    # 15 capped AdvBench rows, 12 in the train part: 30 rows wrap each of them 2-3 times
    assert (record["rows"], record["distinct_requests"], record["skipped_over_max_tokens"]) == (30, 12, 0)
    assert [f["file"] for f in manifest["training_data"]["files"]] == ["data.jsonl"]
    assert "30 rows wrap 12 distinct training requests" in caplog.text
    long = tmp_path / "long.jsonl"
    # 100 distinct long templates (repeating one text made them one near-duplicate group, none left to train on)
    long.write_text("\n".join(json.dumps({"prompt": " ".join(f"tale{i}n{j}" for j in range(100)) + " {{ prompt }}"})
                              for i in range(100)))
    with pytest.raises(ValueError, match=r"^--jailbreak-train-per-class 4: all 4 wrapped training prompts exceed --max-tokens 64"):
        run_fit(FitOptions(out=tmp_path / "short", jailbreak_train_per_class=4, max_tokens=64,
                           **{**common, "data": [tmp_path / "folder" / "data.jsonl"], "jailbreak_templates": long}))
    with pytest.raises(ValueError, match=r"^all 30 prompts exceed --max-tokens 3 once rendered; raise it$"):
        run_fit(FitOptions(out=tmp_path / "none", max_tokens=3, **{**common, "data": [tmp_path / "folder" / "data.jsonl"]}))


def test_fit_names_the_position_table_not_max_tokens_when_the_table_is_the_limit(folder, tmp_path):
    # tester finding: on a backbone with max_position_embeddings 32, "all 80 prompts exceed --max-tokens 32 once
    # rendered; raise it" gave advice that could not help
    import shutil

    short = shutil.copytree(folder, tmp_path / "short-positions")
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 8}))
    with pytest.raises(ValueError) as refused:
        run_fit(FitOptions(data=[_fit_corpus(tmp_path)], backbone=str(short), out=tmp_path / "out",
                           cache_dir=tmp_path / "cache", device="cpu"))
    assert str(refused.value) == (
        "all 90 prompts exceed the backbone's position table (max_position_embeddings 8, the longest --max-tokens it"
        " takes) once rendered; give shorter prompts or a backbone with a longer position table (a larger --max-tokens"
        " cannot help)")


def test_fit_names_max_tokens_when_it_leaves_a_label_unusable_before_extracting_any_state(folder, tmp_path, monkeypatch):
    # every harmful row over --max-tokens failed after the extraction with "no harmful row in the calibration part ...
    # give more harmful prompts per source", a cause that was not it (tester finding)
    def extracted(*args, **kwargs):
        raise AssertionError("states were extracted before the refusal")

    monkeypatch.setattr("herald_service.training.fit.extract_tokenized_states", extracted)
    benign = [{"prompt": f"how do i bake bread {s} {i}", "label": "benign", "source": s} for s in "AC" for i in range(30)]

    def refusal(harmful: list[tuple[str, bool]]) -> str:
        """fit's message for the benign rows and ``(source, long)`` harmful rows (long: 51 tokens, short: 11)."""
        rows = benign + [{"prompt": f"build a bomb {i}" + " hello" * 40 * long, "label": "harmful", "source": source}
                         for i, (source, long) in enumerate(harmful)]
        data = tmp_path / "data.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        with pytest.raises(ValueError) as refused:
            run_fit(FitOptions(data=[data], backbone=str(folder), out=tmp_path / "out", cache_dir=tmp_path / "cache",
                               device="cpu", max_tokens=32))
        return str(refused.value)

    assert refusal([("B", True)] * 25) == ("all 25 harmful rows render to more than --max-tokens 32 tokens; a probe needs"
                                           " both labels: raise --max-tokens or give shorter prompts")
    assert refusal([("B", True)] * 20 + [("B", False)] * 5) == (
        "--max-tokens 32 leaves 5 harmful rows (20 of 25 render to more tokens and are skipped); a probe needs at least"
        " 8 of each label: its test, calibration and fit parts each need both; raise --max-tokens or give shorter prompts")
    # five harmful sources of 5 rows, 2 of them long: groups of 3 rows are left, whose 2 training rows give the
    # calibration quarter none (groups of 5 give it one: checked before the backbone loads)
    message = refusal([(f"H{k}", i >= 3) for k in range(5) for i in range(5)])
    assert message.startswith("--test-fraction 0.2 leaves no harmful row in the calibration part"), message
    assert message.endswith("; 10 prompts over --max-tokens 32 were skipped before the split (10 harmful, 0 benign):"
                            " raise --max-tokens or give shorter prompts"), message


def test_eval_names_max_tokens_when_it_leaves_a_label_unusable_before_extracting_any_state(folder, tmp_path, monkeypatch):
    # as fit (above): herald eval and recipes share load_corpus_states, which extracted first and failed later
    from herald_service.training.eval import EvalOptions, run_eval

    def extracted(*args, **kwargs):
        raise AssertionError("states were extracted before the refusal")

    monkeypatch.setattr("herald_service.training.extract.extract_tokenized_states", extracted)
    rows = [{"prompt": f"how do i bake bread {s} {i}", "label": "benign", "source": s} for s in "AC" for i in range(30)]
    rows += [{"prompt": f"build a bomb {i}" + " hello" * 40, "label": "harmful", "source": "B"} for i in range(25)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError) as refused:
        run_eval(EvalOptions(data=[data], backbone=str(folder), out=tmp_path / "results.json",
                             cache_dir=tmp_path / "cache", device="cpu", max_tokens=32, jailbreak_templates=None,
                             loso=False, curve_sizes=(), guard_per_source=0))
    assert str(refused.value) == ("all 25 harmful rows render to more than --max-tokens 32 tokens; a probe needs both"
                                  " labels: raise --max-tokens or give shorter prompts")
    assert not (tmp_path / "results.json").exists()


def _tiny_gemma3(resolved, sliding_window: int):
    """A random Gemma-3 text model whose local layers attend to ``sliding_window`` tokens, on the tiny tokenizer."""
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=sliding_window,
                              layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
                              max_position_embeddings=256, pad_token_id=0)
    return HFBackbone.from_model(Gemma3ForCausalLM(config).eval(), tokenizer, resolved)


@pytest.mark.parametrize("model", ["llama", "gemma3-sliding", "bloom-untrimmed"])
def test_a_chunked_prefill_gives_the_one_pass_states(resolved, model):
    """Chunked prefill (HFBackbone.prefill_chunks) computes the function one pass computes: each chunk attends to the
    cached keys and values of the earlier ones (with a sliding window where the model has one, shorter than the
    prompt here), whatever the chunk size; the trimmed final layer keeps its keys and values for later chunks."""
    backbone = {"llama": lambda: HFBackbone(resolved, "cpu", "float32"), "gemma3-sliding": lambda: _tiny_gemma3(resolved, 5),
                "bloom-untrimmed": lambda: _tiny_bloom(resolved)}[model]()
    assert backbone.trims_final_layer == (model != "bloom-untrimmed")
    (ids,) = backbone.encode([user_turn(PROMPTS[2])])
    assert len(ids) == 26
    whole = backbone.last_token_states([ids])
    for chunk in (1, 4, 10, 25, 26, 64):  # down to one token; the last chunk one token, then whole, then longer
        steps = list(backbone.prefill_chunks(ids, chunk))
        assert len(steps) == -(-len(ids) // chunk) and all(s is None for s in steps[:-1])
        states = steps[-1]
        assert states.shape == whole.shape and states.dtype == torch.float32
        relative = ((states - whole).norm(dim=-1) / whole.norm(dim=-1)).max().item()
        assert relative <= 1e-5, (model, chunk, relative)
    projected = list(backbone.prefill_chunks(ids, 8, reduce=lambda s: s[..., 0]))[-1]  # the engine's projection path
    assert torch.allclose(projected, whole[..., 0], atol=1e-5)
    ablate = Intervention("ablate", (2,), np.random.default_rng(0).standard_normal((backbone.info.num_layers, backbone.info.hidden_size)),
                          np.ones(backbone.info.num_layers))  # /steer's classification of a long prompt, in chunks
    ablated = backbone.last_token_states([ids], ablate)
    relative = ((list(backbone.prefill_chunks(ids, 8, intervention=ablate))[-1] - ablated).norm(dim=-1)
                / ablated.norm(dim=-1)).max().item()
    assert relative <= 1e-5 and not torch.allclose(ablated, whole, atol=1e-3), (model, relative)
    with pytest.raises(ValueError, match="chunk_tokens must be >= 1"):
        next(backbone.prefill_chunks(ids, 0))


def test_a_chunked_prefill_closed_part_way_leaves_no_hook(resolved):
    backbone = HFBackbone(resolved, "cpu", "float32")
    (ids,) = backbone.encode([user_turn(PROMPTS[2])])
    steps = backbone.prefill_chunks(ids, 8)
    assert next(steps) is None and next(steps) is None
    steps.close()  # the engine's way of dropping a prompt whose client left
    assert all(not layer._forward_hooks for layer in backbone.layers)
    assert not any(m._forward_hooks for m in backbone.layers[-1].modules())  # the final layer's trim is undone too
    assert torch.equal(backbone.last_token_states([ids]), list(backbone.prefill_chunks(ids, len(ids)))[-1])


def test_fit_and_eval_cap_max_tokens_at_the_backbones_position_table(folder, tmp_path, caplog):
    # Tester finding: a Llama with max_position_embeddings=256 was fitted on prompts up to --max-tokens 1024 (a
    # 512-position BERT crashed with a raw tensor-size RuntimeError); serving already capped its limit there.
    import logging

    from herald_service.training.eval import load_corpus_states

    data = _fit_corpus(tmp_path)
    long_rows = [{"prompt": f"tell me story {i}" + " hello" * 300, "label": "benign", "source": "L"} for i in range(10)]
    data.write_text(data.read_text() + "".join(json.dumps(r) + "\n" for r in long_rows))
    with caplog.at_level(logging.INFO):
        manifest = run_fit(FitOptions(data=[data], backbone=str(folder), out=tmp_path / "out", cache_dir=tmp_path / "cache",
                                      device="cpu", max_per_source=None))
    assert manifest["training_data"]["max_tokens"] == 256  # the limit applied is the one recorded
    assert manifest["training_data"]["skipped_over_max_tokens"] == {"L": 10}
    # the log names the sources of the skipped prompts, not only their count (tester: a 5 MB prompt was "1 skipped")
    assert any(m.endswith("(10 over 256 tokens skipped: L 10)") for m in caplog.messages), caplog.messages
    assert ("--max-tokens 1024 capped at 256, the backbone's max_position_embeddings: longer prompts are skipped"
            in caplog.messages)
    corpus = load_corpus_states([data], str(folder), tmp_path / "cache", "cpu", "float32", None, 1024, 0.2, 0)
    assert corpus.max_tokens == 256 and corpus.skipped == {"L": 10} and len(corpus.examples) == 90
    below = load_corpus_states([data], str(folder), tmp_path / "cache", "cpu", "float32", None, 100, 0.2, 0)
    assert below.max_tokens == 100  # a smaller limit is kept as given


def test_the_guard_limit_keeps_the_wrapped_prompt_inside_the_position_table(resolved, caplog):
    # --guard-max-tokens 768 on a 256-position backbone: the guard read positions past the table (tester finding)
    import logging

    from herald_service.training.guard import GUARD_INSTRUCTION, guard_token_limit

    backbone = HFBackbone(resolved, "cpu", "float32")
    with caplog.at_level(logging.INFO, logger="herald_service.training.guard"):
        limit = guard_token_limit(backbone, 768)
    assert 0 < limit < 256 and any("--guard-max-tokens 768 capped at" in m for m in caplog.messages)
    # a prompt of exactly `limit` rendered tokens, wrapped in the instruction, still fits the table
    prompt = " ".join(["hello"] * (limit - len(backbone.encode([user_turn("")])[0])))
    assert len(backbone.encode([user_turn(prompt)])[0]) == limit
    assert len(backbone.encode([user_turn(GUARD_INSTRUCTION.format(prompt=prompt))])[0]) <= 256
    assert guard_token_limit(backbone, 10) == 10  # a smaller limit is kept as given
    backbone.max_positions = 20
    with pytest.raises(ValueError, match=r"the guard instruction takes \d+ tokens, the backbone's whole position table"):
        guard_token_limit(backbone, 768)


def test_eval_refuses_a_probe_of_another_architecture_before_it_reads_the_corpus(folder, tmp_path):
    # tester finding: eval --probe of another backbone was refused 52 s in, after the corpus read and the extraction;
    # a data file with a bad row shows the refusal now comes first (the row's error was named before it)
    from conftest import herald

    bad = tmp_path / "bad.jsonl"
    bad.write_text('["not", "a", "row"]\n')
    shipped = Path(__file__).resolve().parents[1] / "models" / "smollm2-135m-instruct"
    out = herald("eval", "--data", str(bad), "--backbone", str(folder), "--probe", str(shipped),
                 "--out", str(tmp_path / "r.json"), "--cache-dir", str(tmp_path / "cache"))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.strip().startswith(
        "herald: probe was fitted on 'HuggingFaceTB/SmolLM2-135M-Instruct' but the backbone is"), out.stderr
    assert "num_layers 30 in probe.json, 4 in the backbone; hidden_size 576 in probe.json, 64 in the backbone" in out.stderr
    assert not (tmp_path / "cache" / "states").exists()


def test_fit_records_reference_logits_and_other_weights_of_the_architecture_are_refused(folder, tmp_path, monkeypatch,
                                                                                        caplog):
    # Weights of the same architecture that differ from the fitted ones (a damaged copy, another fine-tune) only drew
    # the revision warning, and the probe read states it was not fitted on.
    import shutil

    from herald_service.probes.reference import REFERENCE_PROMPTS
    from safetensors.torch import save_file

    run_fit(FitOptions(data=[_fit_corpus(tmp_path)], backbone=str(folder), out=tmp_path / "probe",
                       cache_dir=tmp_path / "cache", device="cpu", max_per_source=None))
    reference = json.loads((tmp_path / "probe" / "probe.json").read_text())["reference"]
    assert [e["text"] for e in reference["prompts"]] == list(REFERENCE_PROMPTS)
    assert reference["numerics"] == "float32 on cpu"
    settings = Settings(_env_file=None, backbone=str(folder), probe=tmp_path / "probe", cache_dir=tmp_path / "cache",
                        device="cpu", matmul_dtype="weights")
    runtime = load_runtime(settings)
    assert runtime.reference_check == {"median_logit_distance": round(runtime.reference_distance, 4), "tolerance": 1.0,
                                       "prompts": 12} and runtime.reference_distance < 1e-4
    logits = runtime.classify_texts(list(REFERENCE_PROMPTS))
    assert [round(r.logit, 4) for r in logits] == [e["logit"] for e in reference["prompts"]]
    # bf16 linear layers (the CPU default where the CPU has bf16) stay within the tolerance
    load_runtime(settings.model_copy(update={"matmul_dtype": "bfloat16"}))
    # moved by more than NOTABLE_REFERENCE_DISTANCE (recorded logits shifted 0.5) with bf16 linear layers: a warning
    # that verdicts near the threshold can differ from fit's and eval's; in the weights' dtype, the usual info line
    import logging

    from herald_service.probes.reference import NOTABLE_REFERENCE_DISTANCE

    shifted = tmp_path / "shifted"
    shutil.copytree(tmp_path / "probe", shifted)
    manifest = json.loads((shifted / "probe.json").read_text())
    for entry in manifest["reference"]["prompts"]:
        entry["logit"] += 0.5
    (shifted / "probe.json").write_text(json.dumps(manifest))
    assert NOTABLE_REFERENCE_DISTANCE < 0.5
    with caplog.at_level(logging.INFO, logger="herald_service.engine.runtime"):
        load_runtime(settings.model_copy(update={"matmul_dtype": "bfloat16", "probe": shifted}))
        warned = [r for r in caplog.records if r.levelno == logging.WARNING and "verdicts near the threshold" in r.message]
        assert len(warned) == 1 and "with bfloat16 linear layers" in warned[0].message
        caplog.clear()
        load_runtime(settings.model_copy(update={"probe": shifted}))
        assert "verdicts near the threshold" not in caplog.text and "moved by a median of 0.50" in caplog.text
    # the probe's hash is that of the bytes loaded: a probe written over the folder while the backbone loaded (herald
    # fit --overwrite into the folder serve loads) was named by the new files' hash while the old probe served
    from herald_service.backbone.hf import HFBackbone

    probe_json = tmp_path / "probe" / "probe.json"
    served = hashlib.sha256(probe_json.read_bytes() + (tmp_path / "probe" / "probe.safetensors").read_bytes()).hexdigest()
    assert runtime.probe_sha256 == served
    load_backbone = HFBackbone.__init__

    def overwritten_during_the_load(self, *args, **kwargs):
        probe_json.write_text(probe_json.read_text().replace('"threshold": ', '"threshold": 1.5, "was": ', 1))
        load_backbone(self, *args, **kwargs)

    fitted = probe_json.read_text()
    monkeypatch.setattr(HFBackbone, "__init__", overwritten_during_the_load)
    raced = load_runtime(settings)
    assert raced.probe_sha256 == served and raced.probe.threshold == runtime.probe.threshold != 1.5
    monkeypatch.undo()
    assert '"threshold": 1.5' in probe_json.read_text()  # the race happened
    probe_json.write_text(fitted)

    other = tmp_path / "other"
    shutil.copytree(folder, other)
    weights = load_file(other / "model.safetensors")
    weights["model.layers.0.self_attn.o_proj.weight"] = torch.zeros_like(weights["model.layers.0.self_attn.o_proj.weight"])
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    damaged = settings.model_copy(update={"backbone": str(other)})
    with pytest.raises(ProbeMismatch) as refused:
        load_runtime(damaged)
    assert "reference prompts moved by a median of" in refused.value.message
    assert "when recorded in float32 on cpu" in refused.value.message and "now in float32 on cpu." in refused.value.message
    with TestClient(build_app(damaged)) as client:  # the server never says ready on them, and says why
        for _ in range(200):
            r = client.get("/health/ready")
            if "reference" in r.text:
                break
        assert r.status_code == 503 and "reference prompts moved" in r.json()["error"]["message"]
    # herald eval --probe refuses them too (after the extraction, before any fit), resolving the backbone once
    from herald_service.backbone import loader
    from herald_service.training.eval import EvalOptions, run_eval

    calls = []
    resolve = loader.resolve_backbone
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(loader, "resolve_backbone", lambda *a, **k: calls.append(a) or resolve(*a, **k))
        with pytest.raises(ProbeMismatch, match="reference prompts moved by a median of"):
            run_eval(EvalOptions(data=[_fit_corpus(tmp_path)], backbone=str(other), cache_dir=tmp_path / "cache",
                                 out=tmp_path / "eval.json", device="cpu", max_per_source=None, probe=tmp_path / "probe"))
    assert len(calls) == 1 and not (tmp_path / "eval.json").exists()


def test_herald_reference_records_a_probes_reference_logits_and_replaces_them_only_when_told(folder, tmp_path):
    import shutil

    from conftest import herald
    from safetensors.torch import save_file

    run_fit(FitOptions(data=[_fit_corpus(tmp_path)], backbone=str(folder), out=tmp_path / "probe",
                       cache_dir=tmp_path / "cache", device="cpu", max_per_source=None))
    manifest_file = tmp_path / "probe" / "probe.json"
    fitted = json.loads(manifest_file.read_text())
    manifest_file.write_text(json.dumps({k: v for k, v in fitted.items() if k != "reference"}, indent=2))  # an older probe
    common = ("--backbone", str(folder), "--probe", str(tmp_path / "probe"), "--cache-dir", str(tmp_path / "cache"),
              "--device", "cpu", "--matmul-dtype", "weights")
    out = herald("reference", *common[:-2])  # fp32 linear layers by default, as herald fit runs them (tester finding)
    assert out.returncode == 0, out.stderr
    recorded = json.loads(manifest_file.read_text())
    block = recorded["reference"]
    assert block["numerics"] == "float32 on cpu"
    assert block["prompts"] == fitted["reference"]["prompts"]  # what herald fit records, on the same weights
    assert block["revision"] == fitted["backbone"]["revision"] and block["recorded_by"].startswith("herald reference")
    assert json.loads(out.stdout) == block
    assert {k: v for k, v in recorded.items() if k != "reference"} == {k: v for k, v in fitted.items() if k != "reference"}

    other = tmp_path / "other"
    shutil.copytree(folder, other)
    weights = load_file(other / "model.safetensors")
    weights["model.layers.0.self_attn.o_proj.weight"] = torch.zeros_like(weights["model.layers.0.self_attn.o_proj.weight"])
    save_file(weights, other / "model.safetensors", metadata={"format": "pt"})
    on_other = ("--backbone", str(other), *common[2:])
    out = herald("reference", *on_other)  # recorded ones are kept unless --overwrite
    assert out.returncode == 1 and "already records reference logits (in float32 on cpu); --overwrite replaces them" in out.stderr
    assert json.loads(manifest_file.read_text()) == recorded
    out = herald("classify", *on_other, "hello")  # refused: the weights moved them
    assert out.returncode == 1 and "reference prompts moved by a median of" in out.stderr, out.stderr
    out = herald("reference", *on_other, "--overwrite")  # other weights: only when told they are meant
    assert out.returncode == 1 and "the probe was fitted on weights 'content-sha256:" in out.stderr, out.stderr
    assert "Give the weights it was fitted on, or --accept-other-weights" in out.stderr
    manifest_file.chmod(0o444)  # its owner made it read-only: refused, for root too (tester finding)
    out = herald("reference", *on_other, "--overwrite", "--accept-other-weights")
    assert out.returncode == 1 and "cannot be replaced (read-only: mode 0444)" in out.stderr, out.stderr
    manifest_file.chmod(0o644)
    from herald_service.probes.folder import probe_folder_lock

    # another run recording into it (two runs both wrote: tester finding), or a fit writing a probe there
    with probe_folder_lock(tmp_path / "probe"):
        out = herald("reference", *on_other, "--overwrite", "--accept-other-weights")
    assert out.returncode == 1 and out.stderr.strip().splitlines()[-1] == (
        f"herald reference: another herald reference or herald fit is writing the probe in {tmp_path / 'probe'}; run"
        " it again once that one is done")
    assert json.loads(manifest_file.read_text()) == recorded
    out = herald("reference", *on_other, "--overwrite", "--accept-other-weights")
    assert out.returncode == 0, out.stderr
    assert "its directions and threshold may not hold for these weights" in out.stderr  # the revision warning
    out = herald("classify", *on_other, "hello")
    assert out.returncode == 0 and json.loads(out.stdout)["input"] == "hello"
    assert json.loads(manifest_file.read_text())["reference"]["revision"] != fitted["backbone"]["revision"]
    out = herald("classify", *common, "hello")  # the fitted weights now score otherwise: the refusal says why
    assert out.returncode == 1, out.stderr
    assert "They were recorded by 'herald reference --backbone" in out.stderr
    assert f"not on those the probe was fitted on ({fitted['backbone']['revision']!r})" in out.stderr
    assert "Record them again on the weights you serve (herald reference --overwrite)" in out.stderr


def test_named_chat_templates_render_and_hash_the_default_one(folder, tmp_path):
    # tester finding: a tokenizer_config.json holding named templates (a list, as Command-R ships it) stopped every
    # load with "'dict' object has no attribute 'encode'"
    import hashlib
    import shutil

    from herald_service.errors import BackboneError

    plain = HFBackbone(resolve_backbone(str(folder), tmp_path), "cpu", "float32")
    template = (folder / "chat_template.jinja").read_text()
    named = tmp_path / "named"
    shutil.copytree(folder, named)
    (named / "chat_template.jinja").unlink()
    config = json.loads((named / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "{{ 'tools' }}"}, {"name": "default", "template": template}]
    (named / "tokenizer_config.json").write_text(json.dumps(config))
    backbone = HFBackbone(resolve_backbone(str(named), tmp_path), "cpu", "float32")
    assert backbone.info.chat_template_hash == hashlib.sha256(template.encode()).hexdigest()
    assert backbone.info.chat_template_hash == plain.info.chat_template_hash  # the same template: a probe carries over
    assert backbone.encode([user_turn("hello")]) == plain.encode([user_turn("hello")])
    config["chat_template"] = [{"name": "tool_use", "template": template}, {"name": "rag", "template": template}]
    (named / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(BackboneError) as refused:
        HFBackbone(resolve_backbone(str(named), tmp_path), "cpu", "float32")
    assert refused.value.message.startswith("the backbone's tokenizer has named chat templates (rag, tool_use) and none"
                                            " named 'default'")


def _tiny_family(resolved, family: str):
    """A random 2-layer model of ``family`` on the tiny tokenizer, as HFBackbone wraps it on the CPU (from_model)."""
    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
    sizes = {"falcon": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
             "stablelm": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                              intermediate_size=64),
             "opt": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32),
             "gpt2": dict(n_embd=32, n_layer=2, n_head=4)}[family]
    torch.manual_seed(0)
    config = AutoConfig.for_model(family, vocab_size=len(tokenizer), max_position_embeddings=256, **sizes)
    return tokenizer, AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()  # as from_pretrained


@pytest.mark.parametrize("family", ["falcon", "stablelm", "gpt2", "bloom"])
def test_on_the_cpu_each_prompts_states_are_as_alone_for_other_families(resolved, family):
    """Falcon's and StableLM's decoder layers call their attention without passing keywords on: the prompt lengths
    row_attention reads reach it by a context variable (a KeyError on every batch of unequal prompts: tester). Where
    the load's check finds attention by prompt inexact (here fp32 linear layers, whose products round by the batch's
    rows on some shapes) or never called (BLOOM computes its own attention, as Falcon and StableLM do in
    transformers 4.56), such batches run one prompt at a time: either way each prompt's states are the bits it
    gets alone."""
    import importlib
    import inspect

    import transformers
    from packaging.version import Version

    if family == "bloom":
        backbone = _tiny_bloom(resolved)
    else:
        tokenizer, model = _tiny_family(resolved, family)
        backbone = HFBackbone.from_model(model, tokenizer, resolved)
    # whether this transformers' code of the family calls the attention interface row_attention replaces
    modeling = inspect.getsource(importlib.import_module(f"transformers.models.{family}.modeling_{family}"))
    calls_the_interface = "ALL_ATTENTION_FUNCTIONS" in modeling
    assert (backbone.row_attention_calls > 0) is calls_the_interface  # the check ran it, and the lengths arrived
    if Version(transformers.__version__).major >= 5:
        assert calls_the_interface is (family != "bloom")
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    batch = backbone.last_token_states(ids)
    for row, token_ids in enumerate(ids):
        assert torch.equal(batch[row], backbone.last_token_states([token_ids])[0]), (family, row)


def test_packing_is_refused_or_replaced_where_a_packed_prompt_would_see_the_others(resolved, monkeypatch, caplog):
    """OPT builds its positions from the attention mask, BLOOM its ALiBi and mask: packed, a prompt attends to the
    prompts before it (tester: OPT 0.13 relative, BLOOM 5.5e-3, served without a word). Checked at load: refused where
    the layout was asked for, right padding where it was auto's choice (varlen on CUDA: simulated here)."""
    from transformers import AutoTokenizer, BloomConfig, BloomForCausalLM

    from herald_service.backbone import hf
    from herald_service.errors import BackboneError

    tokenizer, opt = _tiny_family(resolved, "opt")
    with pytest.raises(BackboneError, match=r"padding_side packed: a packed prompt's states change with the prompt"
                                            r" packed before it .*; use right \(HERALD_PADDING_SIDE, --padding-side\)"):
        HFBackbone.from_model(opt, tokenizer, resolved, padding_side="packed")
    torch.manual_seed(0)
    bloom = BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=2, n_head=2)).eval()
    with pytest.raises(BackboneError, match="padding_side packed: a packed prompt's states change"):
        HFBackbone.from_model(bloom, AutoTokenizer.from_pretrained(resolved.folder), resolved, padding_side="packed")
    assert HFBackbone(resolved, "cpu", "float32", padding_side="packed").padding_side == "packed"  # Llama: exact
    monkeypatch.setattr(hf, "resolve_padding_side", lambda *args: "packed")
    with caplog.at_level("WARNING"):
        backbone = HFBackbone.from_model(opt, tokenizer, resolved)  # auto
    assert backbone.padding_side == "right" and "batches are right-padded instead of packed" in caplog.text
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    batch = backbone.last_token_states(ids)
    assert all(torch.equal(batch[row], backbone.last_token_states([i])[0]) for row, i in enumerate(ids))


def test_the_decoder_layers_of_a_multimodal_model_are_its_text_decoders(resolved):
    """A Gemma-3 image-text model whose vision tower has as many layers as its text decoder: the hooks go on the text
    decoder's layers (the tower's list came first, and every prompt failed: tester finding)."""
    from transformers import AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
    vocab = len(tokenizer)
    config = Gemma3Config(
        text_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         intermediate_size=64, vocab_size=vocab + 16, sliding_window=16, max_position_embeddings=256),
        vision_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           image_size=32, patch_size=8),
        mm_tokens_per_image=4, image_token_index=vocab + 10, boi_token_index=vocab + 11, eoi_token_index=vocab + 12)
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(config).eval()
    backbone = HFBackbone.from_model(model, tokenizer, resolved)
    assert backbone.layers is model.model.language_model.layers
    states = backbone.last_token_states(backbone.encode([user_turn(p) for p in PROMPTS[:2]]))
    assert states.shape == (2, 2, 32) and torch.isfinite(states).all()


def test_the_position_limit_is_read_under_each_familys_name():
    """MPT names its longest input max_seq_len: unread, the warm-up's 1,470-token prompt stopped its load with a
    tensor size error, and HERALD_MAX_TOKENS was never capped (tester finding)."""
    from types import SimpleNamespace

    from herald_service.backbone.numerics import position_limit

    assert position_limit(SimpleNamespace(max_position_embeddings=2048, n_positions=1024)) == (2048, "max_position_embeddings")
    assert position_limit(SimpleNamespace(n_positions=1024)) == (1024, "n_positions")  # GPT-2
    assert position_limit(SimpleNamespace(max_seq_len=1024)) == (1024, "max_seq_len")  # MPT
    assert position_limit(SimpleNamespace(n_ctx=512, seq_length=None)) == (512, "n_ctx")
    assert position_limit(SimpleNamespace(max_position_embeddings=None, max_seq_len=True)) == (None, None)  # no number
    assert position_limit(SimpleNamespace()) == (None, None)
    from transformers import GPT2Config

    # GPT-2's config answers to max_position_embeddings too (attribute_map): named as its config.json spells it
    assert position_limit(GPT2Config(n_positions=96)) == (96, "n_positions")


def test_a_completion_cut_inside_a_multi_byte_character_ends_at_the_last_whole_one():
    """A byte-level tokenizer spells 🙂 (4 bytes) over several tokens; a completion cut among them ended in U+FFFD
    (tester). Its text now ends before the partial character; a whole one, and a text without one, are kept."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from herald_service.backbone.hf import decode_whole_characters

    trained = ByteLevelBPETokenizer()
    trained.train_from_iterator(["hello there, how are you"] * 4, vocab_size=300, show_progress=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=trained)
    ids = tokenizer.encode("hello 🙂", add_special_tokens=False)
    partial = [n for n in range(1, len(ids)) if tokenizer.decode(ids[:n]).endswith("\ufffd")]  # as decoded before
    assert len(partial) == 3 and partial == list(range(partial[0], len(ids)))  # the emoji's last three tokens
    before = tokenizer.decode(ids[: partial[0] - 1])
    assert before.rstrip() == "hello"
    for n in partial:
        assert decode_whole_characters(tokenizer, ids[:n]) == before
    assert decode_whole_characters(tokenizer, ids) == "hello 🙂"
    assert decode_whole_characters(tokenizer, ids[:2]) == tokenizer.decode(ids[:2])
    # a U+FFFD generated whole stays, spelt over its three bytes' tokens or as one token of its own (SmolLM2 has one;
    # it was cut: re-tester)
    merged = ByteLevelBPETokenizer()
    merged.train_from_iterator(["hello \ufffd there"] * 40, vocab_size=300, show_progress=False)
    for spelling in (tokenizer, PreTrainedTokenizerFast(tokenizer_object=merged)):
        replacement = spelling.encode("hello \ufffd", add_special_tokens=False)
        assert decode_whole_characters(spelling, replacement) == "hello \ufffd"
        partial = spelling.encode("hello \ufffd🙂", add_special_tokens=False)[:-1]
        assert decode_whole_characters(spelling, partial) == "hello \ufffd"


@pytest.fixture(scope="module")
def gpt2_with_probe(tmp_path_factory):
    """A tiny GPT-2 of 96 learned positions and a probe fitted on it: (folder, probe folder)."""
    from tiny_llama import build_tiny_gpt2

    folder = build_tiny_gpt2(tmp_path_factory.mktemp("tiny-gpt2"), n_positions=96)
    backbone = HFBackbone(resolve_backbone(str(folder), tmp_path_factory.mktemp("cache")), "cpu", "float32")
    assert (backbone.max_positions, backbone.max_positions_key) == (96, "n_positions")  # read through the alias
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(PROMPTS[i].split(), 6)) for i in (0, 1) for _ in range(30)]
    states = backbone.last_token_states(backbone.encode([user_turn(t) for t in texts])).numpy()
    probe = HeraldProbe().fit(states, np.array([0] * 30 + [1] * 30)).fitted_
    out = tmp_path_factory.mktemp("gpt2-probe")
    save_probe(probe, out, {"backbone": backbone_manifest(backbone.info)})
    return folder, out


TWENTY_WORDS = " ".join(["please tell me a story about the sea"] * 3).split()[:20]


def test_generation_past_the_position_table_is_refused_before_it_runs(gpt2_with_probe, resolved, tmp_path):
    # tester: GPT-2's generation past n_positions raised IndexError in wpe (/steer 500, steer-eval traceback); a
    # rotary model (the tiny Llama, 256 positions) silently generated from positions it was never trained on
    from herald_service.errors import InputTooLarge

    gpt2 = HFBackbone(resolve_backbone(str(gpt2_with_probe[0]), tmp_path), "cpu", "float32")
    (ids,) = gpt2.encode([user_turn(" ".join(TWENTY_WORDS))])
    assert len(ids) == 27
    assert gpt2.generate(ids, 69).tokens == 69  # to the table's last position
    with pytest.raises(InputTooLarge, match=re.escape(
            "max_new_tokens 70 after the prompt's 27 tokens needs 97 positions; the limit is 96 (the backbone's"
            " n_positions): ask for at most 69 new tokens, or shorten the prompt")) as refused:
        gpt2.generate(ids, 70)
    assert refused.value.field == "max_new_tokens"
    llama = HFBackbone(resolved, "cpu", "float32")
    (ids,) = llama.encode([user_turn(" ".join(["hello"] * 250))])
    with pytest.raises(InputTooLarge, match=re.escape(
            "the limit is 256 (the backbone's max_position_embeddings): shorten the prompt: it leaves no position")):
        llama.generate(ids, 1)


def test_steer_past_the_position_table_is_a_413_naming_max_new_tokens_and_steer_eval_says_so_in_one_line(
        gpt2_with_probe, tmp_path):
    from conftest import herald

    folder, probe = gpt2_with_probe
    settings = Settings(_env_file=None, backbone=str(folder), probe=probe, cache_dir=tmp_path, device="cpu",
                        steer_enabled=True, steer_api_key="steer-key-0123456789")
    key = {"Authorization": "Bearer steer-key-0123456789"}
    with TestClient(build_app(settings)) as client:
        wait_ready(client)
        r = client.post("/steer", json={"prompt": " ".join(TWENTY_WORDS), "max_new_tokens": 100}, headers=key)
        assert r.status_code == 413, r.text
        assert r.json() == {"error": {"type": "input_too_large", "field": "max_new_tokens", "message":
                                      "max_new_tokens 100 after the prompt as sent's 27 tokens needs 127 positions; the"
                                      " limit is 96 (the backbone's n_positions): ask for at most 69 new"
                                      " tokens, or shorten the prompt as sent"}}
        ok = client.post("/steer", json={"prompt": " ".join(TWENTY_WORDS), "max_new_tokens": 69}, headers=key)
        assert ok.status_code == 200, ok.text
        # without the field, the refusal says the 64 was the default, not a number the client sent (tester finding)
        unsent = client.post("/steer", json={"prompt": " ".join(TWENTY_WORDS * 2)}, headers=key)
        assert unsent.status_code == 413 and unsent.json()["error"]["field"] == "max_new_tokens", unsent.text
        assert unsent.json()["error"]["message"].startswith(
            "max_new_tokens (not sent: the default) 64 after the prompt as sent's "), unsent.text
        metrics = client.get("/metrics").text
    assert 'herald_rejected_requests_total{reason="tokens"} 2.0' in metrics
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n" + " ".join(TWENTY_WORDS) + "\n")
    # the first line fits (8 + 80 tokens), the second does not: refused before the first generation
    out = herald("steer-eval", str(prompts), "--max-new-tokens", "80", "--backbone", str(folder), "--probe",
                 str(probe), "--device", "cpu", HERALD_CACHE_DIR=str(tmp_path / "cache"))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().splitlines()[-1] == (
        f"herald steer-eval: --max-new-tokens 80 after {prompts} line 2's 27 tokens needs 107 positions; the limit is"
        f" 96 (the backbone's n_positions): ask for at most 69 new tokens, or shorten {prompts} line 2"),\
        out.stderr
    assert "Traceback" not in out.stderr


def test_the_position_refusal_counts_one_token_in_the_singular_and_names_what_to_shorten():
    from types import SimpleNamespace

    from herald_service.backbone.base import check_generation_fits
    from herald_service.errors import InputTooLarge

    table = SimpleNamespace(max_positions=10, info=SimpleNamespace(), config=SimpleNamespace())
    check_generation_fits(table, 9, 1)  # the last position: fits
    with pytest.raises(InputTooLarge, match=r": ask for at most 1 new token, or shorten the messages as sent$"):
        check_generation_fits(table, 9, 2, "the messages as sent")
    with pytest.raises(InputTooLarge, match=r": shorten prompts\.txt line 3: it leaves no position for a new token$"):
        check_generation_fits(table, 10, 1, "prompts.txt line 3")


def test_loaded_questions_over_the_token_limit_are_refused_with_advice_that_can_work(gpt2_with_probe, tmp_path):
    # "raise --max-tokens" was no help where the limit was the backbone's position table (re-tester)
    from herald_service.training.extract import StateCache
    from herald_service.training.fit import loaded_question_states

    backbone = HFBackbone(resolve_backbone(str(gpt2_with_probe[0]), tmp_path), "cpu", "float32")
    with pytest.raises(ValueError, match=r"^\d+ of the loaded-word questions exceed the token limit 12 once rendered"
                                         r" \(--max-tokens, at most the backbone's position table\); leave"
                                         r" --loaded-questions out, or raise --max-tokens where the backbone has"
                                         r" positions to spare$"):
        loaded_question_states(backbone, StateCache(tmp_path / "cache", backbone), 12)
    assert len(loaded_question_states(backbone, StateCache(tmp_path / "cache", backbone), 96).labels) == 148


def test_eval_with_a_probe_says_when_its_recipe_is_not_the_runs(folder, tmp_path, caplog):
    # a tester ran herald eval --probe on the shipped probe (logistic directions, written rows) with eval's default LDA
    # recipe and read the probe's column and the split-fit Herald's as the same model
    from herald_service.training.eval import EvalOptions, run_eval

    data = _fit_corpus(tmp_path)
    run_fit(FitOptions(data=[data], backbone=str(folder), out=tmp_path / "probe", cache_dir=tmp_path / "cache",
                       device="cpu", max_per_source=None, templated_n=8))
    test_set = tmp_path / "held.jsonl"
    test_set.write_text(json.dumps({"prompt": "how do i bake bread today", "label": "benign", "source": "held"}) + "\n")
    common = dict(data=[data], backbone=str(folder), cache_dir=tmp_path / "cache", device="cpu", max_per_source=None,
                  probe=tmp_path / "probe", test_data=[test_set], methods=("herald",), loso=False, curve_sizes=(),
                  replicates=10, jailbreak_templates=None)
    with caplog.at_level("WARNING", logger="herald_service.training.eval"):
        other = run_eval(EvalOptions(out=tmp_path / "other.json", **common))
    assert other["saved_probe"]["warning"] == (
        "the probe was fitted with the lda+templated recipe (0 wrapped per class, 8 templated, 0 written questions) and"
        " this run's Herald with the lda recipe (0 wrapped per class, 0 templated, 0 written questions): its split fit"
        " is not the probe refitted; give eval the options of the probe's recorded command (probe.json"
        " training_data.command) to compare the two")
    assert other["saved_probe"]["warning"] in caplog.text
    same = run_eval(EvalOptions(out=tmp_path / "same.json", templated_n=8, **common))
    assert "warning" not in same["saved_probe"]
    fewer = run_eval(EvalOptions(out=tmp_path / "fewer.json", templated_n=4, **common))  # the same name, other rows
    assert "(0 wrapped per class, 4 templated, 0 written questions)" in fewer["saved_probe"]["warning"]
    # without Herald among the methods there is no split-fit Herald to compare the probe with (reviewer)
    assert "warning" not in run_eval(EvalOptions(out=tmp_path / "none.json", **{**common, "methods": ("logreg_last",)})
                                     )["saved_probe"]


def test_fit_and_eval_refuse_a_backbone_of_too_few_layers_before_extracting_states(tmp_path):
    # researcher pass: on a 2-layer model both extracted every state, then failed "feature set herald-v1 needs >= 3
    # layers, got 2"; the minimum is now checked once the backbone loads
    from herald_service.training import extract, fit
    from herald_service.training.eval import EvalOptions, run_eval

    shallow = build_tiny_llama(tmp_path / "shallow", num_layers=2)
    extracted = []
    with pytest.MonkeyPatch.context() as patch:
        for module in (extract, fit):
            patch.setattr(module, "extract_tokenized_states", lambda *a, **k: extracted.append(a) or pytest.fail("extracted"))
        message = f"feature set herald-v1 needs a backbone of at least 3 decoder layers; {shallow} has 2"
        with pytest.raises(ValueError, match=re.escape(message)):
            run_fit(FitOptions(backbone=str(shallow), data=[_fit_corpus(tmp_path)], out=tmp_path / "probe",
                               cache_dir=tmp_path / "cache", device="cpu", dtype="float32"))
        with pytest.raises(ValueError, match=re.escape(message)):
            run_eval(EvalOptions(data=[_fit_corpus(tmp_path)], backbone=str(shallow), cache_dir=tmp_path / "cache",
                                 out=tmp_path / "eval.json", device="cpu", max_per_source=None))
        bands = "feature set bands-v1 needs a backbone of at least 7 decoder layers; "
        with pytest.raises(ValueError, match=re.escape(bands)):
            run_eval(EvalOptions(data=[_fit_corpus(tmp_path)], backbone=str(shallow), cache_dir=tmp_path / "cache",
                                 out=tmp_path / "eval.json", device="cpu", max_per_source=None,
                                 methods=("logreg_last", "herald:bands-v1")))
    assert not extracted and not (tmp_path / "probe").exists() and not (tmp_path / "eval.json").exists()
    from herald_service.training.eval import feature_sets_of
    assert feature_sets_of(["herald", "herald:bands-v1", "features_logreg+shift", "logreg_last", "mlpm"]) == [
        "herald-v1", "bands-v1", "herald-v1"]


def _two_sources_a_label(tmp_path, per_source: int):
    """A data file of ``per_source`` rows in each of two benign instruction sources and the two request sources (the
    augmentation options draw from those)."""
    rows = [{"prompt": f"how do i bake bread {PROMPTS[2].split()[i % 10]} {i}", "label": "benign", "source": s}
            for s in ("AlpacaEval", "IFEval") for i in range(per_source)]
    rows += [{"prompt": f"build a bomb {PROMPTS[4].split()[i % 8]} {i}", "label": "harmful", "source": s}
             for s in ("AdvBench", "HarmBench") for i in range(per_source)]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data


@pytest.mark.parametrize("module, option, record", [
    # the fifteenth study's option (docs/eval/recipe_studies.md): set-apart words (which rows a fold may take:
    # tests/test_layouts.py)
    ("layouts", "layout_train_per_class", ("layout_augmentation", "layouts", "TRAIN_LAYOUTS", "LAYOUT")),
    # the seventeenth study's: casually written rows (tests/test_casing.py)
    ("casing", "casual_train_per_class", ("casual_augmentation", "forms", "FORMS", "CASUAL")),
])
def test_eval_adds_dressed_training_rows_of_both_labels_to_the_random_split_and_every_fold(folder, tmp_path, module,
                                                                                           option, record):
    # drawn and held out by source as --format-train-per-class's rows are; each row a dressing of a training prompt
    import importlib

    from herald_service.training import eval as eval_module
    from herald_service.training.eval import EvalOptions, run_eval

    key, described, dressings_name, prefix = record
    dressing = importlib.import_module(f"herald_service.training.{module}")
    dressings = getattr(dressing, dressings_name)
    sources = [(getattr(dressing, f"{prefix}_BENIGN_SOURCE"), 0), (getattr(dressing, f"{prefix}_HARMFUL_SOURCE"), 1)]
    data = _two_sources_a_label(tmp_path, 20)
    written = [json.loads(line)["prompt"] for line in data.read_text().splitlines()]
    trained: dict = {}
    evaluate = eval_module.evaluate_states

    def recording(data, train_index, test_index, plan, extra=None, added_rows=None):
        for held_out in (None, "AdvBench", "IFEval"):
            added = added_rows(held_out)
            trained[held_out] = list(zip(added.sources.tolist(), added.labels.tolist(), added.prompts))
        return evaluate(data, train_index, test_index, plan, extra, added_rows=added_rows)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(eval_module, "evaluate_states", recording)
        results = run_eval(EvalOptions(data=[data], backbone=str(folder), out=tmp_path / "results.json",
                                       cache_dir=tmp_path / "cache", device="cpu", jailbreak_templates=None,
                                       methods=("herald",), curve_sizes=(), guard_per_source=0, replicates=20,
                                       **{option: 6}))
    assert results["meta"][key] == {"per_class": 6, "labels": [1, 0], "random_split_rows": 12,
                                    described: list(dressings)}
    for held_out, added in trained.items():
        assert sorted({(s, y) for s, y, _ in added}) == sources
        assert len(added) == 12, held_out  # 6 of each label in every fold
        assert {p for _, _, p in added} <= {dress(w) for w in written for dress in dressings.values()}, held_out
    assert "herald" in results["loso"]["pooled"]


@pytest.mark.parametrize("module, option, record", [
    # the sixteenth study's option (docs/eval/recipe_studies.md): --layout-questions, beside --loaded-questions
    ("layouts", "layout_questions", ("layouts", "TRAIN_LAYOUTS", "LAYOUT_QUESTIONS_SOURCE", "lays out")),
    # the eighteenth study's: --casual-questions
    ("casing", "casual_questions", ("forms", "FORMS", "CASUAL_QUESTIONS_SOURCE", "writes")),
])
def test_eval_dresses_every_written_question_once_more_with_its_label(folder, tmp_path, module, option, record):
    import importlib

    from herald_service.training import eval as eval_module
    from herald_service.training.eval import EvalOptions, run_eval
    from herald_service.training.loaded_questions import HARMFUL_SOURCE, SOURCE

    described, dressings_name, source_name, verb = record
    dressing = importlib.import_module(f"herald_service.training.{module}")
    dressings, dressed_source = getattr(dressing, dressings_name), getattr(dressing, source_name)
    flag = "--" + option.replace("_", "-")
    data = _two_sources_a_label(tmp_path, 12)
    common = dict(data=[data], backbone=str(folder), out=tmp_path / "results.json", cache_dir=tmp_path / "cache",
                  device="cpu", jailbreak_templates=None, methods=("herald",), curve_sizes=(), guard_per_source=0,
                  replicates=20, loaded_questions=True, harmful_questions=True)
    with pytest.raises(ValueError, match=f"{flag} {verb} the written questions.*: give --loaded-questions"):
        run_eval(EvalOptions(**{**common, "loaded_questions": False, "harmful_questions": False, option: True}))
    trained: dict = {}
    evaluate = eval_module.evaluate_states

    def recording(data, train_index, test_index, plan, extra=None, added_rows=None):
        for held_out in (None, "AdvBench"):
            added = added_rows(held_out)
            trained[held_out] = added
        return evaluate(data, train_index, test_index, plan, extra, added_rows=added_rows)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(eval_module, "evaluate_states", recording)
        results = run_eval(EvalOptions(**common, **{option: True}))
    assert results["meta"][option] == {"n": 296, "harmful": 148, "seed": 0, described: list(dressings)}
    for held_out, added in trained.items():
        sources = added.sources.tolist()
        assert sources.count(SOURCE) == sources.count(HARMFUL_SOURCE) == 148, held_out
        dressed = added.labels[added.sources == dressed_source]
        assert len(dressed) == 296 and int(dressed.sum()) == 148, held_out
        written = [p for p, s in zip(added.prompts, sources) if s in (SOURCE, HARMFUL_SOURCE)]
        dressed_prompts = [p for p, s in zip(added.prompts, sources) if s == dressed_source]
        assert all(any(dress(w) == p for dress in dressings.values()) for w, p in zip(written, dressed_prompts))
        assert sum(w != p for w, p in zip(written, dressed_prompts)) > 250  # dressed, not copied
    assert results["meta"]["loaded_questions"]["n"] == 296  # the written rows themselves, as without the option


def test_eval_takes_casual_training_rows_and_casual_questions_together(folder, tmp_path):
    # the eighteenth study's C1: its first run raised "'LabeledStates' object is not callable" (the casual questions'
    # states took the name the casual rows' closure read)
    from herald_service.training.casing import CASUAL_BENIGN_SOURCE, CASUAL_HARMFUL_SOURCE, CASUAL_QUESTIONS_SOURCE
    from herald_service.training.eval import EvalOptions, run_eval

    results = run_eval(EvalOptions(data=[_two_sources_a_label(tmp_path, 20)], backbone=str(folder),
                                   out=tmp_path / "results.json", cache_dir=tmp_path / "cache", device="cpu",
                                   jailbreak_templates=None, methods=("herald",), curve_sizes=(), guard_per_source=0,
                                   replicates=20, loaded_questions=True, harmful_questions=True,
                                   casual_questions=True, casual_train_per_class=6, layout_train_per_class=6))
    # (an augmentation before the casual rows, as the shipped recipe's jailbreak rows are, chains them in a closure)
    assert results["meta"]["casual_augmentation"]["random_split_rows"] == 12
    assert results["meta"]["layout_augmentation"]["random_split_rows"] == 12
    assert results["meta"]["casual_questions"]["n"] == 296
    sources = {row["source"] for row in results["meta"]["counts"]}  # the corpus's: the added rows train only
    assert sources == {"AlpacaEval", "IFEval", "AdvBench", "HarmBench"}
    assert not sources & {CASUAL_BENIGN_SOURCE, CASUAL_HARMFUL_SOURCE, CASUAL_QUESTIONS_SOURCE}
    assert "herald" in results["loso"]["pooled"]
