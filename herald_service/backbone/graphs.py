"""CUDA graphs of the one-prompt prefill, and installing compiled decoder-layer forwards (the graphs' and the
batched prefill's): the load-time machinery that takes kernel-launch overhead off a small prefill on a large GPU."""

from __future__ import annotations

import logging
import statistics
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import torch
from torch import nn

from herald_service.backbone.attention import CAUSAL_ATTENTION
from herald_service.backbone.hooks import capture_last_token
from herald_service.backbone.numerics import sliding_window_of

if TYPE_CHECKING:
    from herald_service.backbone.hf import HFBackbone

log = logging.getLogger(__name__)

GRAPH_BUCKETS = (32, 64, 128, 256, 512, 1024)
"""Prompt lengths (tokens) with a captured one-prompt CUDA graph; longer prompts run eagerly (launch overhead is
small next to their compute). 1,024 is included because on an H200 host the eager Llama-3.1-8B forward stays
launch-bound up to about that length, with run-to-run spread of +-30% (``benchmarks/results/scaling_h200.json``)."""


class PrefillGraphs:
    """CUDA graphs of the one-prompt prefill, one per length bucket of :data:`GRAPH_BUCKETS`.

    A prompt is right-padded to its bucket, which is exact without a mask (see
    :class:`~herald_service.backbone.hf.HFBackbone`): the graphs run
    :func:`~herald_service.backbone.attention.causal_attention`, and buckets longer than a sliding attention window
    (the window would need its mask) or than the model's position table
    (:func:`~herald_service.backbone.numerics.position_limit`: learned positions past it would
    index out of range on the device) are left out. The last-token rows are copied by the capture hooks into a
    static ``(1, layer, d_model)`` buffer. Graphs are captured once, longest first, sharing one memory pool. If capture fails (a model whose forward
    synchronizes with the host), graphs are captured again without compiled layers, and if that fails too they are
    switched off and the eager path serves.

    Args:
        compile_layers: capture each decoder layer's forward compiled by ``torch.compile`` (TorchInductor fuses
            the norms, rotary embedding and activation into a few kernels; one compile per bucket, shared by all
            layers). The compiled forwards are used only while capturing; the eager batched path is unchanged.
            ``benchmarks/graph_capture.py`` measures what it gives.
    """

    def __init__(self, backbone: HFBackbone, buckets: Sequence[int] = GRAPH_BUCKETS, compile_layers: bool = False) -> None:
        self.backbone = backbone
        window = sliding_window_of(backbone.decoder.config.get_text_config())
        limit = min(window or 1 << 62, backbone.max_positions or 1 << 62)  # no padding past the positions
        self.buckets = tuple(sorted(w for w in buckets if w <= limit))
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self.compiled = compile_layers and self._capture_all(True)
        if not self.compiled and not self._capture_all(False):
            log.warning("one-prompt prefill runs eagerly")
        self.replay_s = {width: self._time_replay(width) for width in self._graphs}
        """Seconds per replay of each captured bucket (median of three, measured at capture)."""

    def replay_seconds(self, lengths: Sequence[int]) -> float | None:
        """Measured seconds to replay one graph per prompt of these lengths (tokens); None if one is too long."""
        total = 0.0
        for n in lengths:
            width = self._bucket(n)
            if width is None:
                return None
            total += self.replay_s[width]
        return total

    def _bucket(self, tokens: int) -> int | None:
        """The smallest captured bucket that holds a prompt of ``tokens``, or None."""
        return next((w for w in self.buckets if w >= tokens and w in self._graphs), None)

    def _time_replay(self, width: int, repeats: int = 3) -> float:
        return median_cuda_seconds(self._graphs[width][0].replay, self.backbone.device, repeats)

    def _capture_all(self, compile_layers: bool) -> bool:
        """Capture every bucket; on any failure keep none and return False."""
        try:
            with self.backbone.attention(CAUSAL_ATTENTION), compiled_forwards(self.backbone.layers, compile_layers):
                pool = None
                for width in sorted(self.buckets, reverse=True):
                    pool = self._capture(width, pool)
            return True
        except Exception:  # capture is an optimization: never let it stop the service from loading
            log.warning("CUDA graph capture failed (compiled layers: %s)", compile_layers, exc_info=True)
            self._graphs.clear()
            return False

    @torch.inference_mode()
    def _capture(self, width: int, pool: object) -> object:
        b = self.backbone
        ids = torch.full((1, width), b.pad_id, dtype=torch.long, device=b.device)
        last = torch.zeros(1, dtype=torch.long, device=b.device)
        out = torch.zeros((1, b.info.num_layers, b.info.hidden_size), dtype=b.dtype, device=b.device)

        def forward() -> None:
            with capture_last_token(b.layers, last, out=out):
                b.decoder(input_ids=ids, use_cache=False)

        side = torch.cuda.Stream(device=b.device)
        side.wait_stream(torch.cuda.current_stream(b.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # the first call also compiles, when compiling
                forward()
        torch.cuda.current_stream(b.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            forward()
        self._graphs[width] = (graph, ids, last, out)
        return graph.pool()

    @torch.inference_mode()
    def run(self, token_ids: Sequence[int]) -> torch.Tensor | None:
        """States ``(1, layer, d_model)`` float32 on the device (a copy: the next replay cannot overwrite it), or None
        when the prompt is longer than every bucket."""
        n = len(token_ids)
        width = self._bucket(n)
        if width is None:
            return None
        graph, ids, last, out = self._graphs[width]
        ids.fill_(self.backbone.pad_id)
        ids[0, :n].copy_(self.backbone._upload(torch.tensor(token_ids, dtype=torch.long)))
        last.fill_(n - 1)
        graph.replay()
        return out.to(dtype=torch.float32, copy=True)


@contextmanager
def compiled_forwards(layers: Sequence[nn.Module], enabled: bool = True) -> Iterator[None]:
    """While open, each decoder layer's ``forward`` is ``torch.compile(forward, dynamic=False)``; restored on exit.

    Hooks stay outside the compiled code (``nn.Module`` runs them around ``forward``). Compiled code is shared by
    layers of one class, so a shape compiles once for the whole stack; the recompile limit is raised while open so
    that every graph bucket gets its own static-shape kernels.
    """
    if not enabled:
        yield
        return
    with torch._dynamo.config.patch(recompile_limit=64):
        with installed_forwards(layers, [torch.compile(layer.forward, dynamic=False) for layer in layers]):
            yield


@contextmanager
def installed_forwards(layers: Sequence[nn.Module], forwards: Sequence[Callable]) -> Iterator[None]:
    """While open, ``layers[i].forward`` is ``forwards[i]`` (an instance attribute, so ``nn.Module`` still runs the
    hooks around it); whatever each layer had before, its own instance forward or none, is restored on exit."""
    own = [layer.__dict__.get("forward") for layer in layers]
    try:
        for layer, forward in zip(layers, forwards):
            layer.forward = forward
        yield
    finally:
        for layer, previous in zip(layers, own):
            if previous is None:
                layer.__dict__.pop("forward", None)
            else:
                layer.forward = previous


def median_cuda_seconds(run: Callable[[], object], device: torch.device, repeats: int, warmup: int = 0) -> float:
    """Median wall-clock seconds of ``run()`` over ``repeats`` calls after ``warmup`` untimed ones, the device
    synchronized before and after each (load-time measurements that pick a path; CUDA only)."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize(device)
        started = time.perf_counter()
        run()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)
