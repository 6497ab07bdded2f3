"""How a batch is laid out (HFBackbone padding_side): ``auto`` resolution and refusals, on the CPU.

The varlen layout itself runs only on CUDA; its agreement with single-prompt states is in ``tests/test_gpu.py``.
"""

import pytest
import torch

from herald_service.backbone.numerics import resolve_padding_side
from herald_service.config import Settings
from herald_service.errors import BackboneError

CPU, CUDA = torch.device("cpu"), torch.device("cuda")


def test_auto_is_varlen_only_on_cuda_in_half_precision():
    assert resolve_padding_side("auto", CUDA, torch.bfloat16) == "varlen"
    assert resolve_padding_side("auto", CUDA, torch.float16) == "varlen"
    assert resolve_padding_side("auto", CUDA, torch.float32) == "right"
    assert resolve_padding_side("auto", CPU, torch.float32) == "right"
    assert resolve_padding_side("auto", CPU, torch.bfloat16) == "right"


@pytest.mark.parametrize("side", ["right", "left", "packed"])
def test_explicit_layouts_are_kept(side):
    assert resolve_padding_side(side, CPU, torch.float32) == side


@pytest.mark.parametrize(("device", "dtype"), [(CPU, torch.bfloat16), (CUDA, torch.float32)])
def test_varlen_where_the_kernel_cannot_run_is_refused_with_the_field(device, dtype):
    with pytest.raises(BackboneError, match="varlen needs CUDA and bfloat16/float16") as info:
        resolve_padding_side("varlen", device, dtype)
    assert info.value.field == "padding_side"


def test_unknown_layout_is_refused_naming_the_choices():
    with pytest.raises(BackboneError, match="auto, right, left, packed, varlen"):
        resolve_padding_side("middle", CPU, torch.float32)


def test_setting_reaches_the_backbone_from_the_environment(monkeypatch):
    monkeypatch.setenv("HERALD_PADDING_SIDE", "packed")
    assert Settings().padding_side == "packed"
    monkeypatch.setenv("HERALD_PADDING_SIDE", "diagonal")
    with pytest.raises(ValueError, match="padding_side"):
        Settings()


def test_a_sliding_window_model_never_gets_varlen():
    # varlen_attention attends over the whole prompt: on Gemma-3 (512-token window) it would be wrong past 512 tokens
    assert resolve_padding_side("auto", CUDA, torch.bfloat16, sliding_window=512) == "right"
    with pytest.raises(BackboneError, match="no sliding attention window.*512 tokens") as info:
        resolve_padding_side("varlen", CUDA, torch.bfloat16, sliding_window=512)
    assert info.value.field == "padding_side"
    assert resolve_padding_side("packed", CUDA, torch.bfloat16, sliding_window=512) == "packed"  # transformers' masks


def test_sliding_window_of_reads_the_config_and_its_switch():
    from types import SimpleNamespace

    from herald_service.backbone.numerics import sliding_window_of

    assert sliding_window_of(SimpleNamespace(sliding_window=512)) == 512  # Gemma-3
    assert sliding_window_of(SimpleNamespace(sliding_window=4096, use_sliding_window=False)) is None  # Qwen2
    assert sliding_window_of(SimpleNamespace(sliding_window=None)) is None and sliding_window_of(SimpleNamespace()) is None
