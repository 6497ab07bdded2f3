"""The report's scope line comes from the results' ``meta.backbone``, so each backbone's report is true of it."""

from herald_service.training.report import _backbone_line


def test_chat_model_and_base_model_are_described_from_the_results():
    chat = _backbone_line({"id": "HuggingFaceTB/SmolLM2-135M-Instruct", "num_layers": 30, "hidden_size": 576,
                           "chat_template_hash": "872be49d"})
    base = _backbone_line({"id": "gemma-3-270m-q4_k_m", "num_layers": 18, "hidden_size": 640, "chat_template_hash": None})
    assert chat.startswith("`HuggingFaceTB/SmolLM2-135M-Instruct` (30 layers, d=576), CPU, fp32; prompts rendered with its chat template.")
    assert base.startswith("`gemma-3-270m-q4_k_m` (18 layers, d=640), CPU, fp32; no chat template, so prompts are fed as raw text.")
    assert "Gemma" not in chat and "SmolLM2" not in base
    assert _backbone_line({"id": "x", "num_layers": 2, "hidden_size": 8, "device": "cuda", "dtype": "bfloat16"}).startswith(
        "`x` (2 layers, d=8), CUDA, bf16.")
