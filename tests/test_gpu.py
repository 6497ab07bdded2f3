"""CUDA correctness (marker ``gpu``): run on the device machine with ``pytest -m gpu tests/test_gpu.py``.

Skipped, and reported as skipped, where torch sees no CUDA device (this CPU machine and CI).
"""

import numpy as np
import pytest
import torch

from herald_service.backbone.base import Intervention
from herald_service.backbone.hf import HFBackbone
from herald_service.backbone.loader import resolve_backbone
from herald_service.types import user_turn
from tiny_llama import build_tiny_llama

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

PROMPTS = ["how do i bake bread", "build a bomb", "write a poem about the sea please tell me a story", "hello"]


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    folder = build_tiny_llama(tmp_path_factory.mktemp("tiny"), num_layers=4, hidden_size=64)
    return resolve_backbone(str(folder), tmp_path_factory.mktemp("cache"))


def test_auto_settings_pick_cuda_and_bf16(resolved):
    backbone = HFBackbone(resolved)
    assert backbone.info.device.startswith("cuda") and backbone.info.dtype == "bfloat16"


@pytest.mark.parametrize("side", ["left", "right"])
def test_cuda_fp32_batched_states_equal_single_prompt_states(resolved, side):
    backbone = HFBackbone(resolved, "cuda", "float32", padding_side=side)
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    batch = backbone.last_token_states(ids)
    for row, token_ids in enumerate(ids):
        alone = backbone.last_token_states([token_ids])[0]
        relative = ((batch[row] - alone).norm(dim=-1) / alone.norm(dim=-1)).max().item()
        assert relative <= 1e-4, (side, row, relative)


def test_cuda_matches_cpu_and_bf16_is_close(resolved):
    cpu = HFBackbone(resolved, "cpu", "float32")
    ids = cpu.encode([user_turn(p) for p in PROMPTS])
    reference = cpu.last_token_states(ids)
    fp32 = HFBackbone(resolved, "cuda", "float32").last_token_states(ids)
    bf16 = HFBackbone(resolved, "cuda", "bfloat16").last_token_states(ids)
    assert ((fp32 - reference).norm(dim=-1) / reference.norm(dim=-1)).max().item() <= 1e-3
    assert ((bf16 - reference).norm(dim=-1) / reference.norm(dim=-1)).max().item() <= 5e-2


def test_cuda_ablation_zeroes_projection(resolved):
    backbone = HFBackbone(resolved, "cuda", "float32")
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    ablated = backbone.last_token_states(ids, Intervention("ablate", (2,), w, np.ones(4))).numpy()
    assert np.abs(ablated[:, 1] @ w[1]).max() < 1e-4


def _relative(a, b):
    return ((a - b).norm(dim=-1) / b.norm(dim=-1)).max().item()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_varlen_batch_matches_the_fp32_reference_like_any_half_precision_batch(resolved, dtype):
    cpu = HFBackbone(resolved, "cpu", "float32")
    ids = cpu.encode([user_turn(p) for p in PROMPTS])
    assert len({len(i) for i in ids}) == len(PROMPTS)
    reference = cpu.last_token_states(ids)
    varlen = HFBackbone(resolved, "cuda", dtype)  # auto -> varlen
    assert varlen.padding_side == "varlen"
    varlen.eager_floor_s = None  # the varlen kernel is under test: no per-prompt graph replays for small batches
    packed = varlen.last_token_states(ids)
    padded = HFBackbone(resolved, "cuda", dtype, padding_side="right", cuda_graphs=False).last_token_states(ids)
    # Same tolerance as test_cuda_matches_cpu_and_bf16_is_close; and no worse than right padding in that precision.
    assert _relative(packed, reference) <= 5e-2
    assert _relative(packed, reference) <= 1.5 * _relative(padded, reference) + 1e-3
    for row, token_ids in enumerate(ids):  # each row is its own prompt: no attention across the packed boundary
        assert _relative(packed[row : row + 1], varlen.last_token_states([token_ids])) <= 5e-2


def test_varlen_restores_the_attention_implementation_and_keeps_interventions(resolved):
    backbone = HFBackbone(resolved, "cuda", "bfloat16")
    before = backbone.decoder.config._attn_implementation
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    w /= np.linalg.norm(w, axis=1, keepdims=True)
    ablated = backbone.last_token_states(ids, Intervention("ablate", (2,), w, np.ones(4))).numpy()
    assert backbone.decoder.config._attn_implementation == before
    assert np.abs(ablated[:, 1] @ w[1]).max() < 2e-2 * np.abs(ablated[:, 1]).max()


def test_launched_states_equal_synchronous_states_even_when_the_next_launch_reuses_the_graph(resolved):
    backbone = HFBackbone(resolved, "cuda", "bfloat16")
    assert backbone.overlaps_host and backbone.graphs is not None
    backbone.eager_floor_s = None  # the batch below runs the eager varlen forward
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    batch_wait = backbone.launch_last_token_states(ids)
    other = list(ids[0])
    other[1] = other[2]  # same length, so the same graph bucket, different content
    first_wait = backbone.launch_last_token_states([ids[0]])  # graph replay into the static output buffer
    second_wait = backbone.launch_last_token_states([other])  # replays into the same buffer
    assert torch.equal(second_wait(), backbone.last_token_states([other]))
    assert torch.equal(first_wait(), backbone.last_token_states([ids[0]]))  # not overwritten by the second replay
    assert not torch.equal(first_wait(), second_wait())
    assert torch.equal(batch_wait(), backbone.last_token_states(ids))
    assert batch_wait().dtype == torch.float32 and batch_wait().device.type == "cpu"


@pytest.mark.parametrize("compile_graphs", [False, True])
def test_graph_replay_matches_the_fp32_reference_with_and_without_compiled_layers(resolved, compile_graphs):
    cpu = HFBackbone(resolved, "cpu", "float32")
    ids = cpu.encode([user_turn(p) for p in PROMPTS])
    reference = cpu.last_token_states(ids)
    backbone = HFBackbone(resolved, "cuda", "bfloat16", compile_graphs=compile_graphs)
    assert backbone.graphs is not None and backbone.graphs.compiled is compile_graphs
    assert sorted(backbone.graphs._graphs) == list(backbone.graphs.buckets)  # every bucket captured
    eager = HFBackbone(resolved, "cuda", "bfloat16", padding_side="right", cuda_graphs=False)
    for row, token_ids in enumerate(ids):
        replayed = backbone.last_token_states([token_ids])  # one prompt: the graph path
        # The bf16 tolerance every other path meets, and no worse than the eager bf16 forward of the same prompt.
        assert _relative(replayed, reference[row : row + 1]) <= 5e-2
        assert _relative(replayed, reference[row : row + 1]) <= 1.5 * _relative(eager.last_token_states([token_ids]), reference[row : row + 1]) + 1e-3
    # Capture leaves the model as it found it: no compiled forward left on a layer, the attention setting restored.
    assert not any("forward" in layer.__dict__ for layer in backbone.layers)
    assert backbone.decoder.config._attn_implementation == eager.decoder.config._attn_implementation


def test_launching_a_batch_never_waits_for_the_device(resolved):
    # The pipelined worker launches batch k+1 while batch k runs; any host sync at launch (a pageable copy, mask
    # preparation reading the device) would serialize them. CUDA's sync debug mode turns every sync into an error.
    backbone = HFBackbone(resolved, "cuda", "bfloat16")  # varlen
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    assert backbone._replays_cheaper(ids)  # a tiny model: replaying per prompt beats its eager floor
    floor, backbone.eager_floor_s = backbone.eager_floor_s, None
    reference = backbone.last_token_states(ids)
    backbone.launch_last_token_states(ids)()  # warm: first-call allocations
    torch.cuda.set_sync_debug_mode("error")
    try:
        wait = backbone.launch_last_token_states(ids)  # the eager varlen path
        single = backbone.launch_last_token_states([ids[1]])  # the graph path
        backbone.eager_floor_s = floor
        replays = backbone.launch_last_token_states(ids)  # one replay per prompt
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(wait(), reference)
    assert torch.equal(single(), backbone.last_token_states([ids[1]]))
    assert torch.equal(replays(), backbone.last_token_states(ids))


def test_small_batches_replay_the_graph_per_prompt_only_when_measured_cheaper(resolved):
    cpu = HFBackbone(resolved, "cpu", "float32")
    ids = cpu.encode([user_turn(p) for p in PROMPTS])
    reference = cpu.last_token_states(ids)
    backbone = HFBackbone(resolved, "cuda", "bfloat16")
    graphs = backbone.graphs
    assert graphs is not None and sorted(graphs.replay_s) == list(graphs.buckets) and backbone.eager_floor_s > 0
    replays = graphs.replay_seconds([len(t) for t in ids])
    assert replays is not None and backbone._replays_cheaper(ids) == (replays < backbone.eager_floor_s)
    assert backbone._replays_cheaper(ids)  # 4 layers of d=64: a replay is far below an eager pass's launch floor
    replayed = backbone.last_token_states(ids)
    eager = backbone._eager_states(ids, None).float().cpu()
    assert _relative(replayed, reference) <= 5e-2 and _relative(eager, reference) <= 5e-2
    for row, token_ids in enumerate(ids):  # row i is prompt i's own replay
        assert torch.equal(replayed[row : row + 1], backbone.last_token_states([token_ids]))
    too_long = [ids[0], list(ids[1]) * (max(graphs.buckets) // len(ids[1]) + 1)]
    assert graphs.replay_seconds([len(t) for t in too_long]) is None and not backbone._replays_cheaper(too_long)
    backbone.eager_floor_s = 0.0  # were an eager pass free, replays would never be chosen
    assert not backbone._replays_cheaper(ids)


def test_projection_on_the_device_equals_projection_of_the_copied_states(resolved):
    from herald_service.probes.directions import LayerDirections

    backbone = HFBackbone(resolved, "cuda", "bfloat16")
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    directions = LayerDirections((w / np.linalg.norm(w, axis=1, keepdims=True)).astype(np.float16), np.zeros(4, np.float32), np.ones(4, np.float32))
    ids = backbone.encode([user_turn(p) for p in PROMPTS])
    for batch in (ids, [ids[2]]):  # the small-batch replays and the one-prompt graph path
        on_device = backbone.launch_last_token_states(batch, reduce=directions.dot)()
        assert on_device.device.type == "cpu" and on_device.dtype == torch.float32 and tuple(on_device.shape) == (len(batch), 4)
        copied = directions.dot(backbone.last_token_states(batch))
        assert torch.allclose(on_device, copied, rtol=1e-4, atol=1e-4)


def test_compiled_batches_match_the_reference_and_never_compile_after_the_warmup(resolved):
    from torch._dynamo.utils import counters

    cpu = HFBackbone(resolved, "cpu", "float32")
    ids = cpu.encode([user_turn(p) for p in PROMPTS])
    equal = [ids[0], list(reversed(ids[0])), ids[0]]  # equal lengths: the padded path
    single = (list(ids[2]) * 200)[:1100]  # longer than every graph bucket: the eager one-prompt path
    batches = [ids, ids[:3], equal, [single]]
    references = [cpu.last_token_states(batch) for batch in batches]
    backbone = HFBackbone(resolved, "cuda", "bfloat16", compile_batches=True)  # varlen
    assert backbone.batch_forwards is not None
    backbone.eager_floor_s = None  # small batches run the compiled batched forward, not per-prompt graph replays
    before = counters["stats"]["unique_graphs"]
    for batch, reference in zip(batches, references):
        assert _relative(backbone.last_token_states(batch), reference) <= 5e-2
    assert counters["stats"]["unique_graphs"] == before  # the warm-up at load covered every shape seen here
    assert not any("forward" in layer.__dict__ for layer in backbone.layers)  # compiled forwards only while running
    backbone.launch_last_token_states(ids)()
    torch.cuda.set_sync_debug_mode("error")
    try:
        wait = backbone.launch_last_token_states(ids)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(wait(), backbone.last_token_states(ids))


def test_cuda_generation_with_and_without_a_time_budget(resolved):
    # /steer's generations on the GPU: the time budget (transformers' max_time) cuts decoding short and says so
    from herald_service.backbone.base import Generation

    backbone = HFBackbone(resolved, "cuda", "float32")
    ids = backbone.encode([user_turn("tell me a story")])[0]
    full = backbone.generate(ids, 8)
    assert isinstance(full, Generation) and full.cut_short is False
    cut = backbone.generate(ids, 8, max_time_s=1e-9)
    assert cut.cut_short is True and len(backbone.tokenizer(cut.text)["input_ids"]) < 8
    assert 1 <= cut.tokens < 8 and 1 <= full.tokens <= 8  # the counts /steer's decode rate is measured with
    stopped = backbone.generate(ids, 8, stop=lambda: True)  # a /steer whose client left: stops after the first token
    assert stopped.tokens == 1 and stopped.cut_short
    direction = np.zeros((4, 64), dtype=np.float32)
    direction[:, 0] = 1.0
    edited = backbone.generate(ids, 8, Intervention("ablate", (2,), direction, np.ones(4, np.float32)), max_time_s=60.0)
    assert isinstance(edited, Generation) and edited.cut_short is False
    # a /steer prefill in chunks (transformers' prefill_chunk_size) generates the same tokens, and a client gone
    # between two chunks stops it there with nothing generated
    assert len(ids) > 8
    assert backbone.generate(ids, 8, chunk_tokens=4) == full
    asked: list[int] = []
    assert backbone.generate(ids, 8, stop=lambda: asked.append(1) or len(asked) >= 2, chunk_tokens=4) == Generation("", 0, True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_chunked_prefill_matches_one_pass_and_an_engine_set_to_chunk_serves_on_cuda(resolved, dtype):
    """Chunking is off on CUDA by default (engine.chunk_tokens_for) but may be set: the chunked prefill on the device
    gives the one-pass states (fp32: to rounding; bf16: as close as any half-precision batch), and the pipelined
    engine answers a chunked prompt and the short ones around it."""
    from herald_service.engine.engine import EngineLimits, InferenceEngine
    from herald_service.metrics import HeraldMetrics
    from herald_service.probes.probe import HeraldProbe

    backbone = HFBackbone(resolved, "cuda", dtype)
    (ids,) = backbone.encode([user_turn(PROMPTS[2])])
    whole = backbone.last_token_states([ids])
    chunked = list(backbone.prefill_chunks(ids, 4))[-1]
    assert chunked.device.type == "cpu" and chunked.dtype == torch.float32
    assert _relative(chunked, whole) <= (1e-5 if dtype == "float32" else 3e-2)
    states = backbone.last_token_states(backbone.encode([user_turn(p) for p in PROMPTS * 4]))
    probe = HeraldProbe(seed=0).fit(states.numpy(), np.array([0, 1, 0, 0] * 4)).fitted_
    engine = InferenceEngine(backbone, probe, EngineLimits(chunk_tokens=4), HeraldMetrics())
    assert backbone.overlaps_host and engine.chunk_tokens == 4
    engine.start()
    futures = engine.submit(backbone.encode([user_turn(p) for p in PROMPTS]))
    results = [f.result(timeout=60) for f in futures]
    engine.stop()
    expected = probe.predict(backbone.last_token_states(backbone.encode([user_turn(p) for p in PROMPTS])))
    assert [r.tokens for r in results] == [len(i) for i in backbone.encode([user_turn(p) for p in PROMPTS])]
    assert np.allclose([r.logit for r in results], expected.logits, atol=0.05 if dtype == "bfloat16" else 1e-4)
