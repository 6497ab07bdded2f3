"""App factory and lifespan (vLLM / FastAPI-template habit): ``build_app(settings)`` wires routers, middleware and
error handlers and loads nothing; the lifespan loads backbone and probe in a worker thread, warms up, and starts
the inference engine, while ``/health/live`` already answers and ``/health/ready`` says 503.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from contextlib import asynccontextmanager
from typing import AsyncIterator, Callable, TypeVar

from fastapi import FastAPI

from herald_service import __version__
from herald_service.api.deps import STEER_DISABLED, STEER_KEY_NAME, AppState
from herald_service.api.errors import install_error_handlers
from herald_service.api.json_body import UniqueKeysRoute
from herald_service.api.middleware import (BearerGate, BodyBudget, BodyDeadline, BodyLimit, CloseUnreadBodies,
                                          JsonBodies, OperationsPortOnly, RequestMetrics)
from herald_service.api.openapi import limited_openapi
from herald_service.api.routes import classify, docs, moderations, ops, steer
from herald_service.backbone.base import runs_in_chunks
from herald_service.config import Settings
from herald_service.engine.admission import OWN_WORK_HEADROOM, WAIT_HEADROOM, BatchTiming, Work
from herald_service.engine.engine import EngineLimits, InferenceEngine
from herald_service.engine.runtime import Runtime, load_runtime
from herald_service.engine.service import Moderator, decode_time, engine_limits
from herald_service.errors import HeraldError
from herald_service.metrics import HeraldMetrics
from herald_service.types import user_turn

log = logging.getLogger(__name__)
T = TypeVar("T")

WARMUP_PROMPTS = ("Hello!", "How do I bake sourdough bread?")
WARMUP_TIMINGS = 2
"""Each warm-up shape is timed this many times and its fastest kept: other work on the machine only adds time, and one
timing of 8 x 94 tokens read 0.78 s on one start and 1.25 s on the next (third breaker pass), which the fit then
held to."""
COST_SHAPES = ((" ".join([WARMUP_PROMPTS[1]] * 8),) * 8, (" ".join([WARMUP_PROMPTS[1]] * 48),) * 2,
               (" ".join([WARMUP_PROMPTS[1]] * 180),))
"""The other shapes timed at warm-up: 8 prompts of the second warm-up prompt said 8 times (94 tokens each on the
embedded backbone), 2 of it said 48 times (534 tokens each) and 1 said 180 times (1,470 tokens), so that the
per-batch, per-token and per-squared-token costs are told apart from the start (engine.admission.BatchCost; about 5 s
more on the CPU, timed twice). The long one since bf16 linear layers (2026-12-02): they made the per-token work 2-2.8x
cheaper and left attention, the squared term, in fp32, so it is a larger share of a long prompt; seeded up to 828
tokens the model priced 8 x 4,031 tokens at 27 s against a real 49 s after short traffic, with it at 53 s against 50 s
(benchmarks/admission.py, ``admission_cpu.json``). No new words: the fake backbone numbers words as it first meets
them, and its scores in tests stay those of the warm-up prompts alone."""
CUDA_COST_SHAPES = ((" ".join([WARMUP_PROMPTS[1]] * 10),) * 64, (" ".join([WARMUP_PROMPTS[1]] * 90),) * 8,
                    (" ".join([WARMUP_PROMPTS[1]] * 360),) * 2)
"""The shapes timed instead on a GPU: 64 prompts of about 120 tokens, 8 of about 970 and 2 of about 3,900, each
batch near the default 8,192-token budget. On the H200, :data:`COST_SHAPES` took 14-39 ms, mostly launch overhead:
seeded on them, the cost model priced 64 x 431 and 64 x 831 tokens at 1.3-1.5 times their real time and 8 x 4,031
tokens at 4.4 times (benchmarks/admission.py, ``--target h200``; docs/PERFORMANCE.md)."""


STEER_WARMUP_TOKENS = 16
"""New tokens of the generation timed at warm-up when steering is on, for the decode step of the first /steer's
estimate (:func:`~herald_service.engine.service.steer_job_seconds`); about 1 s more start-up on the CPU."""


class ShutDownDuringStartUp(Exception):
    """Raised in the load thread between warm-up steps once the server is shutting down (``AppState.stopping``): a
    SIGTERM during the warm-up waited for all of it, 24 s on the CPU (tester finding), where Kubernetes allows a
    terminating pod ``terminationGracePeriodSeconds``. The model load itself is one call and runs to its end."""


def _stop_if_shutting_down(stopping: threading.Event | None) -> None:
    if stopping is not None and stopping.is_set():
        raise ShutDownDuringStartUp


def _load_and_warm(settings: Settings, loader: Callable[[Settings], Runtime],
                   stopping: threading.Event | None = None) -> Runtime:
    runtime = loader(settings)
    _stop_if_shutting_down(stopping)
    if settings.warmup:
        ids = runtime.backbone.encode([user_turn(p) for p in WARMUP_PROMPTS])
        runtime.probe.predict(runtime.backbone.last_token_states(ids))
    # Everything loaded so far (model, tokenizer, libraries) lives as long as the process. Frozen, a full garbage
    # collection no longer walks it: with the embedded backbone loaded (442k tracked objects) one took 409 ms with the
    # GIL held on the dev VM, a stall of the model worker and of every request in flight; frozen, under 0.1 ms.
    gc.collect()
    gc.freeze()
    return runtime


def _warm_cost(runtime: Runtime, chunk_tokens: int = 0, stopping: threading.Event | None = None) -> tuple[BatchTiming, ...]:
    """The cost model's seed: the warm-up prompts (two short prompts, mostly fixed per-batch cost) and the shapes of
    :data:`COST_SHAPES` (:data:`CUDA_COST_SHAPES` on a GPU), each timed :data:`WARMUP_TIMINGS` times (the fastest
    kept), after the warm-up run (which paid the one-off costs: lazy initialisation, kernel selection). Fewer shapes
    cannot tell the terms apart (a tokens-per-second rate from the warm-up batch alone was a third of the real one
    on the CPU and refused bursts the worker would have answered in a seventh of the timeout; two shapes without a
    long one under-estimated 861-token prompts by half). Each shape runs as the engine will run it: a prompt longer
    than ``chunk_tokens`` (the engine's chunk, 0: none) is prefilled in chunks, about 10% dearer than one pass on the
    CPU (a breaker pass: seeded on one pass, a 3,938-token prompt priced under a 5 s timeout ran 5 s for a 504, three
    times). Shapes that took no measurable time are left out. Raises :class:`ShutDownDuringStartUp` between timings once
    ``stopping`` is set."""
    timings = []
    device = getattr(runtime.backbone, "device", None)  # the fake backend has none
    shapes = CUDA_COST_SHAPES if device is not None and device.type == "cuda" else COST_SHAPES
    positions = getattr(runtime.backbone, "max_positions", None)
    for prompts in (WARMUP_PROMPTS, *shapes):
        ids = runtime.backbone.encode([user_turn(p) for p in prompts])
        if positions and max(len(i) for i in ids) > positions:  # a short position table: shape left out
            continue
        elapsed = min(_timed_unless_stopping(runtime, ids, chunk_tokens, stopping) for _ in range(WARMUP_TIMINGS))
        if elapsed > 0:
            timings.append(BatchTiming.of_prompts([len(i) for i in ids], elapsed))
    log.info("batch cost seeded on %s", ", ".join(
        f"{t.prompts} prompt{'' if t.prompts == 1 else 's'} of {t.tokens} tokens in {t.seconds:.3f} s" for t in timings))
    return tuple(timings)


def _timed(runtime: Runtime, ids: list[list[int]], chunk_tokens: int = 0) -> float:
    """Seconds of the forward passes and probe over ``ids`` as the engine runs them (``InferenceEngine._plan``): the
    prompts up to ``chunk_tokens`` (all, with 0) in one batch, each longer one prefilled alone in chunks of it."""
    chunked = [i for i in ids if runs_in_chunks(len(i), chunk_tokens)]
    batched = [i for i in ids if not runs_in_chunks(len(i), chunk_tokens)]
    started = time.perf_counter()
    if batched:
        runtime.probe.predict(runtime.backbone.last_token_states(batched))
    for token_ids in chunked:
        runtime.probe.predict(list(runtime.backbone.prefill_chunks(token_ids, chunk_tokens))[-1])
    return time.perf_counter() - started


def _timed_unless_stopping(runtime: Runtime, ids: list[list[int]], chunk_tokens: int,
                           stopping: threading.Event | None) -> float:
    _stop_if_shutting_down(stopping)
    return _timed(runtime, ids, chunk_tokens)


def _warm_decode_step(runtime: Runtime) -> tuple[float, int]:
    """Decode seconds and steps (:func:`~herald_service.engine.service.decode_time`) of a greedy generation of
    :data:`STEER_WARMUP_TOKENS` tokens from the first warm-up prompt, after an untimed one of two tokens (which pays
    generation's one-off costs)."""
    (ids,) = runtime.backbone.encode([user_turn(WARMUP_PROMPTS[0])])
    runtime.backbone.generate(ids, 2)
    prefill_s = _timed(runtime, [ids])
    started = time.perf_counter()
    generation = runtime.backbone.generate(ids, STEER_WARMUP_TOKENS)
    return decode_time(generation, time.perf_counter() - started, prefill_s)


def _load_warm_and_measure(settings: Settings, loader: Callable[[Settings], Runtime], state: AppState | None = None
                           ) -> tuple[Runtime, EngineLimits, tuple[BatchTiming, ...], tuple[float, int] | None]:
    """The runtime, the engine's limits resolved for its device (:func:`engine_limits`), the cost model's seed
    (:func:`_warm_cost`) and, with steering on, the decode seconds and steps of a timed generation
    (:func:`_warm_decode_step`); neither of the last two with ``HERALD_WARMUP=false``. Once the model is loaded,
    ``state.loading`` says the warm-up runs (its 503s said "loading model and probe" throughout: tester finding).

    Raises:
        ShutDownDuringStartUp: ``state.stopping`` was set (the server shuts down); checked after the load and between
            the warm-up's steps.
        SettingsConflict: the batch token budget cannot hold the longest single pass on the loaded backbone's device.
    """
    stopping = state.stopping if state is not None else None
    runtime = _load_and_warm(settings, loader, stopping)
    limits = engine_limits(settings, runtime.backbone)
    if not settings.warmup:
        return runtime, limits, (), None
    if state is not None:
        state.loading = "warming up: timing the batch shapes admission control prices requests by"
    seed = _warm_cost(runtime, limits.chunk_tokens or 0, stopping)
    _stop_if_shutting_down(stopping)
    return runtime, limits, seed, _warm_decode_step(runtime) if settings.steer_enabled else None


LOAD_THREAD = "herald-load"
"""Name of the thread :func:`in_passing_thread` runs the model's load and warm-up on."""


LOAD_WAIT_AT_SHUTDOWN_S = 30.0
"""Seconds ``herald serve`` lets a model load under way finish once its server has stopped (a GGUF conversion is then
kept for the next start); past them it exits without it. Unbounded, a SIGTERM during a large backbone's load waited
for all of it, past Kubernetes' grace period (70 s in k8s/), and the pod was killed anyway (operator tester)."""


def wait_for_the_load(timeout_s: float | None = None) -> str | None:
    """Return once no load thread (:data:`LOAD_THREAD`) runs, or ``timeout_s`` seconds have passed
    (:func:`load_under_way` then says one still runs): ``herald serve`` calls it after its server has stopped, so
    that a shutdown during the start-up lets the load finish while the interpreter is still whole. Left to the
    interpreter's exit, the load ran on after ``concurrent.futures`` had stopped taking work, and a GGUF conversion
    under way failed in ``save_pretrained`` and was thrown away (tester finding: the next start converted again).
    The warm-up stops at its next step (:class:`ShutDownDuringStartUp`); the load and a conversion run on.

    Returns:
        Why such a load failed (nobody awaited it any more, and the process exited 0 without a word: tester finding),
        or None.
    """
    failure = None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    for thread in threading.enumerate():
        if thread.name == LOAD_THREAD and thread is not threading.current_thread():
            # after uvicorn's "Finished server process", which read as the process's end (tester nit)
            log.info("server stopped; the process waits%s for the model load under way to finish, then exits (a GGUF"
                     " conversion is kept for the next start)", "" if timeout_s is None else f" up to {timeout_s:g} s")
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            error = getattr(thread, "herald_error", None)
            if error is not None and not isinstance(error, ShutDownDuringStartUp):
                failure = error.message if isinstance(error, HeraldError) else f"{type(error).__name__}: {error}"
    return failure


def load_under_way() -> bool:
    """Whether a load thread (:data:`LOAD_THREAD`) still runs."""
    return any(t.name == LOAD_THREAD and t.is_alive() for t in threading.enumerate() if t is not threading.current_thread())


async def in_passing_thread(fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)`` on a thread of its own that ends when ``fn`` returns (awaited, its exception raised here).

    Why not ``asyncio.to_thread``: the model's load and warm-up run torch's CPU kernels, which start an OpenMP thread
    team for the calling thread, and an executor thread (with its team) stays alive. The inference worker's own team
    then makes more OpenMP threads than cores, where libgomp stops spin-waiting between parallel regions, and every
    forward of the worker took about twice as long on the 2-core CPU (two embedded prompts: 115 ms against 57 ms after a
    load on a thread that had ended; the warm-up, timed on the fast thread, seeded the cost model at half the worker's
    real cost). A thread that ends takes its team with it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if done.done():  # the awaiting coroutine was cancelled (shutdown during the load)
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed to the awaiting coroutine
            result, error = None, exc
        threading.current_thread().herald_error = error  # type: ignore[attr-defined]  # for wait_for_the_load
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop closed meanwhile (shutdown during the load): nobody waits
            pass

    # Not a daemon: on Ctrl+C during the load, the interpreter waits for it to return rather than exiting under a
    # thread still inside torch, which aborted the process ("terminate called without an active exception", status
    # 134; second breaker pass).
    thread = threading.Thread(target=run, name=LOAD_THREAD)
    thread.start()
    result = await done
    thread.join()  # it is past fn already: its OpenMP team is gone before the worker's first forward
    return result


async def _bring_up(state: AppState, loader: Callable[[Settings], Runtime]) -> None:
    settings = state.settings
    try:
        runtime, limits, seed, decode_timing = await in_passing_thread(_load_warm_and_measure, settings, loader, state)
    except HeraldError as exc:
        state.load_error = exc.message
        state.metrics.worker_failed.set(1)
        log.critical("cannot start: %s", exc.message)
        _stop_if_asked(state)
        return
    except Exception as exc:  # report any loader failure on /health/ready instead of hanging in "loading"
        state.load_error = f"cannot load model or probe: {type(exc).__name__}: {exc}"
        state.metrics.worker_failed.set(1)
        log.critical(state.load_error, exc_info=exc)
        _stop_if_asked(state)
        return
    engine = InferenceEngine(runtime.backbone, runtime.probe, limits, state.metrics, seed)
    engine.start()
    info = runtime.backbone.info
    state.metrics.model_info.labels(info.model_id, info.revision[:24], runtime.probe_name, (runtime.probe_sha256 or "")[:12],
                                    runtime.probe.feature_set, info.device, info.dtype, __version__).set(1)
    if runtime.reference_distance is not None:
        state.metrics.reference_distance.labels(runtime.probe_name).set(runtime.reference_distance)
    # before readiness, so a client that saw ready can read it; a warning where the setting was given (the default
    # 4096 above a small model's table is no one's mistake): /v1/info said 1e23 while loading, then 8192 (tester)
    limit, limit_name = runtime.token_limit(settings.max_tokens)
    if limit != settings.max_tokens:
        level = logging.WARNING if "max_tokens" in settings.model_fields_set else logging.INFO
        log.log(level, "prompts are limited to %d tokens, %s: below HERALD_MAX_TOKENS (%d)", limit, limit_name,
                settings.max_tokens)
    state.runtime, state.engine = runtime, engine
    state.moderator = Moderator(runtime, engine, settings, state.metrics, decode_timing)
    try:
        shortest = len(runtime.backbone.encode([user_turn("")])[0])
    except HeraldError as exc:  # a backbone with neither chat template nor BOS token renders it as no token at all:
        # raised here, after readiness, it ended this task unlogged, before "ready" (tester finding)
        log.warning("the empty prompt cannot be scored on this backbone (%s): no start-up check of"
                    " HERALD_REQUEST_TIMEOUT_S against the shortest prompt", exc.message)
    else:
        unmeetable = timeout_warning(engine, settings.request_timeout_s, shortest)
        if unmeetable:
            log.warning(unmeetable)
    log.info("ready: %s, probe %s", info.model_id, runtime.probe_path)


def timeout_warning(engine: InferenceEngine, timeout_s: float, shortest_tokens: int) -> str | None:
    """A start-up warning when the 413 limit, :data:`~herald_service.engine.admission.OWN_WORK_HEADROOM` of
    ``request_timeout_s``, is below the cost model's price of the shortest prompt the backbone renders
    (``shortest_tokens``: an empty user turn in its chat template): every request would then be refused 413 (or time
    out) while ``/health/ready`` says ready (breaker: ``HERALD_REQUEST_TIMEOUT_S=0.05``; a re-test found a fixed
    16-token price too low for SmolLM2's 30-token empty prompt). ``None`` when it is met, or before any batch was
    timed (``HERALD_WARMUP=false``)."""
    seconds = engine.cost.seconds(Work.of_prompts([shortest_tokens]))
    if seconds is None or seconds <= OWN_WORK_HEADROOM * timeout_s:
        return None
    return (f"{OWN_WORK_HEADROOM:.0%} of HERALD_REQUEST_TIMEOUT_S {timeout_s:g} s, the most estimated model time a"
            f" request is admitted with, is below the shortest prompt's estimated model time"
            f" ({shortest_tokens} tokens, {seconds:.3g} s) on this backbone: every request will be refused or time out,"
            " unless the warm-up was timed slow (other work on this machine), which the first one-prompt request,"
            " run on an idle worker, corrects")


def _stop_if_asked(state: AppState) -> None:
    # `herald serve` must fail at start-up on a bad backbone or probe (DESIGN section 2): it passes a callback that
    # stops the server; the CLI then exits non-zero with the message.
    if state.on_load_error is not None:
        state.on_load_error()


def build_app(
    settings: Settings,
    loader: Callable[[Settings], Runtime] = load_runtime,
    on_load_error: Callable[[], None] | None = None,
) -> FastAPI:
    """Create the Herald app. Nothing is loaded until the lifespan starts.

    Args:
        settings: the process settings.
        loader: builds the runtime (backbone + probe); tests pass their own.
        on_load_error: called once if loading fails (``herald serve`` stops its server); without it the app stays
            up with ``/health/ready`` answering 503 and the reason.
    """
    metrics = HeraldMetrics()
    state = AppState(settings=settings, metrics=metrics, on_load_error=on_load_error)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.loading_task = asyncio.create_task(_bring_up(state, loader))
        try:
            yield
        finally:
            state.stopping.set()  # a warm-up still running stops at its next step
            state.loading_task.cancel()
            if state.engine is not None:
                # a job ends by its request's deadline (admission), so that long is enough for the worker to finish
                await asyncio.to_thread(state.engine.stop, settings.request_timeout_s)
            gc.unfreeze()  # an app built again in this process (tests, reloads) must not inherit a frozen old model

    app = FastAPI(
        title="Herald",
        version=__version__,
        summary="Safety moderation from a chat model's own hidden states.",
        lifespan=lifespan,
        # "POST /classify/" got a bodiless 307 to /classify (a client that does not follow it for a POST saw no
        # JSON error): now a 404 naming the path, like any other unknown path (breaker finding)
        redirect_slashes=False,
        docs_url=None,  # /docs and /redoc are routes.docs: FastAPI's load their scripts from a CDN
        redoc_url=None,
    )
    app.state.herald = state
    install_error_handlers(app)
    routers = (classify.router, moderations.router, steer.router, ops.router, docs.router)
    for router in routers:
        app.include_router(router)
    metrics.admission_wait_limit.set(WAIT_HEADROOM * settings.request_timeout_s)
    # model routes' series at 0 from the start (HeraldMetrics.start_routes); the rest appear as they are used
    metrics.start_routes([r.path for router in (classify.router, moderations.router, steer.router) for r in router.routes],
                         decision_routes=[r.path for router in (classify.router, moderations.router) for r in router.routes])
    paths = {r.path for router in routers for r in router.routes} | {r.path for r in app.routes if isinstance(getattr(r, "path", None), str)}
    max_body = settings.max_body_bytes()
    set_by = settings.max_body_bytes_formula()
    budget = BodyBudget(settings.max_buffered_body_bytes, "HERALD_MAX_BUFFERED_BODY_BYTES")
    app.state.body_budget = budget  # what the requests in progress hold, for tests and debugging
    app.add_middleware(BodyLimit, max_bytes=max_body, metrics=metrics, set_by=set_by, budget=budget)
    app.add_middleware(BodyDeadline, timeout_s=settings.body_timeout_s, metrics=metrics, setting="HERALD_BODY_TIMEOUT_S")
    json_routes = [r for router in routers for r in router.routes if isinstance(r, UniqueKeysRoute)]
    app.add_middleware(JsonBodies, methods_by_path={r.path: frozenset(r.methods) for r in json_routes}, metrics=metrics)
    api_keys = [k.get_secret_value() for k in settings.api_keys]
    steer_keys = [settings.steer_api_key.get_secret_value()] if settings.steer_enabled and settings.steer_api_key else []
    keys_by_path = {"/classify": api_keys, "/v1/moderations": api_keys, "/steer": steer_keys}
    keyed_paths = {path for path, keys in {**keys_by_path, "/v1/info": api_keys}.items() if keys}  # info: deps.ApiKey
    app.openapi = limited_openapi(app, settings, keyed_paths)  # type: ignore[method-assign]
    app.add_middleware(BearerGate, keys_by_path=keys_by_path,
                       key_names={"/steer": STEER_KEY_NAME}, closed={} if steer_keys else {"/steer": STEER_DISABLED})
    # outside the key check (a keyed path on the health port is a 404, not a 401), inside the metrics (which keep the
    # health port's requests out, 404s included, and give them their X-Request-ID) and CloseUnreadBodies
    app.add_middleware(OperationsPortOnly, health_port=settings.health_port, main_port=settings.port)
    app.add_middleware(CloseUnreadBodies)  # outside every middleware that answers before reading the body
    app.add_middleware(RequestMetrics, metrics=metrics, paths=frozenset(paths), health_port=settings.health_port)
    return app
