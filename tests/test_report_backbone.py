"""The report's scope line comes from the results' ``meta.backbone``, so each backbone's report is true of it."""

from herald_service.training.report import _backbone_line


def test_chat_model_and_base_model_are_described_from_the_results():
    chat = _backbone_line({"id": "HuggingFaceTB/SmolLM2-135M-Instruct", "num_layers": 30, "hidden_size": 576,
                           "chat_template_hash": "872be49d"})
    base = _backbone_line({"id": "gemma-3-270m-q4_k_m", "num_layers": 18, "hidden_size": 640, "chat_template_hash": None})
    assert chat.startswith("`HuggingFaceTB/SmolLM2-135M-Instruct` (30 layers, d=576), device and dtype not recorded;"
                           " prompts rendered with its chat template.")
    assert base.startswith("`gemma-3-270m-q4_k_m` (18 layers, d=640), device and dtype not recorded; no chat template, so"
                           " prompts are fed as raw text.")
    assert "Gemma" not in chat and "SmolLM2" not in base
    assert _backbone_line({"id": "x", "num_layers": 2, "hidden_size": 8, "device": "cuda", "dtype": "bfloat16"}).startswith(
        "`x` (2 layers, d=8), CUDA, bf16.")


def test_the_numerics_herald_eval_ran_in_are_stated_and_never_guessed():
    # tester finding: the line said "CPU, fp32" for every run, as meta.backbone recorded no device or dtype
    from herald_service.training.eval import backbone_numerics
    from herald_service.types import BackboneInfo

    info = BackboneInfo("x", "r", 2, 8, "c", None, "x", device="cpu", dtype="float32", matmul_dtype="bfloat16")
    assert backbone_numerics(info) == {"device": "cpu", "dtype": "float32", "matmul_dtype": "bfloat16"}
    plain = BackboneInfo("x", "r", 2, 8, "c", None, "x", device="cuda", dtype="bfloat16")
    assert backbone_numerics(plain) == {"device": "cuda", "dtype": "bfloat16", "matmul_dtype": "bfloat16"}
    shape = {"id": "x", "num_layers": 2, "hidden_size": 8}
    assert _backbone_line({**shape, **backbone_numerics(info)}).startswith(
        "`x` (2 layers, d=8), CPU, fp32, linear layers (matmuls) in bf16.")
    assert _backbone_line({**shape, **backbone_numerics(plain)}).startswith(
        "`x` (2 layers, d=8), CUDA, bf16, linear layers (matmuls) in bf16.")
    assert _backbone_line(shape).startswith("`x` (2 layers, d=8), device and dtype not recorded.")
