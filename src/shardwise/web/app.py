"""The web planner: an HTTP API with the CLI's JSON contracts, and the page that uses it.

Quick requests (an estimate, a schedule of modest size, the catalog) are answered in the server process;
searches and serving simulations go through the job queue (:mod:`.jobs`): the POST waits for the answer
(and cancels the job if the client goes away), or with `?background=true` returns the job at once to be
followed with GET /api/jobs/{id} or its event stream, and cancelled with DELETE. Bad input is HTTP 422
with the CLI's one-line message in `detail`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from shardwise import __version__
from shardwise.console import finite
from shardwise.errors import ShardwiseError
from shardwise.web import tasks
from shardwise.web.jobs import JobQueue, Limits, QueueFull
from shardwise.web.schema import add_bodies

STATIC = Path(__file__).parent / "static"


@dataclass(frozen=True)
class WebSettings:
    limits: Limits = field(default_factory=Limits)
    inline_cells: int = 20_000  # estimates and schedules up to this many stages x micro-batches run inline
    inline_threads: int = 2  # inline requests computing at once; more wait their turn (no GIL thrashing)
    inline_rl_tokens: float = 2**27  # RL estimates generating at most this many response tokens (responses x cap) run inline
    max_body_bytes: int = 32 * 2**20


class JSONOut(JSONResponse):
    """Compact JSON; non-finite numbers as null."""

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError):
            text = json.dumps(finite(content), separators=(",", ":"), allow_nan=False, ensure_ascii=False)
        return text.encode("utf-8")


def _error(status: int, detail: str, **headers: str) -> JSONOut:
    return JSONOut({"detail": detail}, status_code=status, headers=headers or None)


def _validation_line(exc: RequestValidationError) -> str:
    """FastAPI's validation errors (malformed JSON, a missing body) as one line."""
    parts = []
    for err in exc.errors():
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if err.get("type") == "json_invalid":
            at = f" at character {loc[0]}" if loc else ""
            parts.append(f"body: malformed JSON{at}: {err.get('ctx', {}).get('error', err.get('msg'))}")
        else:
            parts.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class BodyLimit:
    """Refuse a request body longer than `limit` bytes (HTTP 413) before reading it."""

    def __init__(self, app: Any, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            length = dict(scope.get("headers") or []).get(b"content-length")
            if length is not None and (not length.isdigit() or int(length) > self.limit):
                response = _error(413, f"the request body is larger than the server's limit of {self.limit:,} bytes")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


@lru_cache(maxsize=1)
def catalog() -> dict[str, Any]:
    """Models, GPUs, schedules and the choices the forms offer."""
    from shardwise.engines import targets
    from shardwise.pipeline import list_schedules, schedule_info
    from shardwise.specs.hardware import get_gpu, gpu_names
    from shardwise.specs.model import preset_names
    from shardwise.specs.model_ref import load_model
    from shardwise.train.planner import OBJECTIVES

    models = []
    for name in preset_names():
        m = load_model(name)
        models.append({"name": name, "params_b": m.params_total / 1e9, "active_params_b": m.params_active / 1e9,
                       "layers": m.layers, "hidden": m.hidden, "heads": m.heads, "kv_heads": m.n_kv_heads,
                       "experts": m.experts, "vocab": m.vocab})
    gpus = []
    for name in gpu_names():
        g = get_gpu(name)
        gpus.append({"name": g.name, "aliases": list(g.aliases), "memory_gib": g.memory_gib,
                     "price_usd_per_hour": g.price_usd_per_hour, "gpus_per_node": g.gpus_per_node,
                     "tflops": g.tflops})
    schedules = [{"name": n, "description": schedule_info(n).description, "placement": schedule_info(n).placement_at(1),
                  "vpp_rule": schedule_info(n).vpp_rule.code} for n in list_schedules()]
    return {"version": __version__, "models": models, "gpus": gpus, "schedules": schedules,
            "objectives": list(OBJECTIVES), "precisions": ["bf16", "fp16", "fp8", "fp32"],
            "serving_precisions": ["bf16", "fp16", "fp8", "int8", "int4", "fp4"],
            "export_targets": [{"name": t.name, "kind": t.kind, "label": t.label, "version": t.version}
                               for t in targets.TARGETS.values()]}


def answer_inline(task: str, body: Any, limit_cells: int, limit_rl_tokens: float = 2**27) -> tuple[bool, Any]:
    """(True, the answer) when the request simulates at most `limit_cells` pipeline stages x micro-batches
    (an RL estimate: generates at most `limit_rl_tokens` response tokens), else (False, None): it goes to the
    job queue. Checks the body either way."""
    if task == "rl/estimate":
        from shardwise.rl.step import estimate_rl

        job = tasks.rl_job(body)
        if tasks.rl_tokens(job) > limit_rl_tokens:
            return False, None
        return True, estimate_rl(job).to_dict()
    if task == "train/estimate":
        jobs = tasks.estimate_jobs(body)
        if max(tasks.estimate_cells(j) for j in jobs) > limit_cells:
            return False, None
        return True, tasks.estimate_result(jobs)
    from shardwise.pipeline import schedule_info

    cells = tasks.schedule_cells(body)  # checks the body: a named schedule exists
    named = body.get("schedule", "1f1b") if isinstance(body, dict) and body.get("csv") is None else None
    searched = isinstance(named, str) and schedule_info(named).takes_costs
    if cells * (20 if searched else 1) > limit_cells:  # `auto` searches schedules before simulating one
        return False, None
    return True, tasks.run_task(task, body)


EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@lru_cache(maxsize=1)
def rl_example_jobs() -> dict[str, Any]:
    """examples/rl-*.yaml as job documents, by file stem (none in an installed wheel)."""
    import yaml

    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("rl-*.yaml"))}


def create_app(settings: WebSettings | None = None) -> FastAPI:
    settings = settings or WebSettings()
    jobs = JobQueue(settings.limits)
    inline = anyio.CapacityLimiter(settings.inline_threads)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        jobs.start()
        yield
        jobs.stop()

    app = FastAPI(title="Shardwise", version=__version__, lifespan=lifespan, default_response_class=JSONOut,
                  description="Plan, simulate and verify how to parallelise LLM training and serving. "
                              "Each endpoint returns what the matching CLI command prints with `--format json`; "
                              "bad input is HTTP 422 with the CLI's one-line message in `detail`.")
    app.state.jobs = jobs
    app.add_middleware(GZipMiddleware, minimum_size=2048)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)

    @app.exception_handler(ShardwiseError)
    async def _bad_input(request: Request, exc: ShardwiseError) -> JSONOut:
        return _error(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _bad_request(request: Request, exc: RequestValidationError) -> JSONOut:
        return _error(422, _validation_line(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONOut:
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONOut:
        return _error(500, f"internal error: {type(exc).__name__}: {exc}")

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            app.openapi_schema = add_bodies(doc)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    async def finished(request: Request, job_id: str, background: bool) -> JSONOut:
        """The job's answer once it ends (cancelled if the client leaves), or the job itself at once."""
        job = jobs.get(job_id)
        if background:
            return JSONOut(jobs.snapshot(job) | {"poll": f"/api/jobs/{job.id}", "events": f"/api/jobs/{job.id}/events"},
                           status_code=202)
        while not job.finished.is_set():
            if await request.is_disconnected():
                jobs.cancel(job.id)
                return _error(499, "the client went away; the job was cancelled")
            await asyncio.sleep(0.05)
        if job.state == "done":
            return JSONOut(job.result)
        return _error(job.status, job.error or job.state)

    async def queued(request: Request, task: str, body: Any, background: bool, **params: Any) -> JSONOut:
        try:
            job = jobs.submit(task, body, **params)
        except QueueFull as exc:
            return _error(503, str(exc), **{"Retry-After": "30"})
        return await finished(request, job.id, background)

    async def quick_or_queued(request: Request, task: str, body: Any, background: bool) -> JSONOut:
        if not background:
            done, answer = await anyio.to_thread.run_sync(answer_inline, task, body, settings.inline_cells,
                                                          settings.inline_rl_tokens, limiter=inline)
            if done:
                return JSONOut(answer)
        return await queued(request, task, body, background)

    background_flag = Query(False, description="return the job at once (202) instead of waiting; follow it at /api/jobs/{id}")
    plot_flag = Query(False, description="add the data of the CLI's --plot figure under `plot`")

    @app.get("/api/health", tags=["meta"])
    async def health() -> JSONOut:
        """Liveness and the job queue's state."""
        return JSONOut({"status": "ok", "version": __version__, "jobs": jobs.stats()})

    @app.get("/api/catalog", tags=["meta"])
    async def get_catalog() -> JSONOut:
        """Model presets, GPUs (memory, price) and pipeline schedules."""
        return JSONOut(catalog())

    @app.post("/api/train/estimate", tags=["train"])
    async def train_estimate(request: Request, body: Any = Body(...), background: bool = background_flag) -> JSONOut:
        """`shardwise train estimate JOB --format json`: memory per GPU, step time, MFU, tokens/s of one job
        (or a list of jobs)."""
        return await quick_or_queued(request, "train/estimate", body, background)

    @app.post("/api/train/plan", tags=["train"])
    async def train_plan(request: Request, body: Any = Body(...), background: bool = background_flag) -> JSONOut:
        """`shardwise train plan ... --format json`: the best plans, the Pareto front and what was rejected."""
        return await queued(request, "train/plan", body, background)

    @app.post("/api/train/export", tags=["train"])
    async def train_export(body: Any = Body(...)) -> JSONOut:
        """`shardwise train export JOB --to ENGINE --format F`: the plan as torchtitan, Megatron-LM or DeepSpeed
        launch arguments, script or config file (`text` is what the CLI prints)."""
        return JSONOut(await anyio.to_thread.run_sync(tasks.run_task, "train/export", body, limiter=inline))

    @app.post("/api/schedule/simulate", tags=["schedule"])
    async def schedule_simulate(request: Request, body: Any = Body(...), background: bool = background_flag) -> JSONOut:
        """`shardwise schedule simulate ... --format json`: makespan, bubbles, peak activations and each
        rank's timeline."""
        return await quick_or_queued(request, "schedule/simulate", body, background)

    @app.post("/api/schedule/compare", tags=["schedule"])
    async def schedule_compare(body: Any = Body(...)) -> JSONOut:
        """`shardwise schedule compare ... --format json`: every schedule on the same stage times."""
        return JSONOut(await anyio.to_thread.run_sync(tasks.run_task, "schedule/compare", body, limiter=inline))

    @app.post("/api/serve/simulate", tags=["serve"])
    async def serve_simulate(request: Request, body: Any = Body(...), background: bool = background_flag,
                             plot: bool = plot_flag) -> JSONOut:
        """`shardwise serve simulate JOB --format json`: vLLM-style latency and throughput metrics."""
        return await queued(request, "serve/simulate", body, background, plot=plot)

    @app.post("/api/serve/plan", tags=["serve"])
    async def serve_plan(request: Request, body: Any = Body(...), background: bool = background_flag, plot: bool = plot_flag) -> JSONOut:
        """`shardwise serve plan ... --format json`: the cheapest deployment meeting the SLOs."""
        return await queued(request, "serve/plan", body, background, plot=plot)

    @app.post("/api/rl/estimate", tags=["rl"])
    async def rl_estimate(request: Request, body: Any = Body(...), background: bool = background_flag) -> JSONOut:
        """`shardwise rl estimate JOB --format json`: one RL iteration (rollout, forward passes, training, weight
        sync) under the job's placement and mode: per-phase seconds, memory per phase, GPU idle time, tokens/s
        generated and trained, and the iteration's timeline per pool."""
        return await quick_or_queued(request, "rl/estimate", body, background)

    @app.post("/api/rl/plan", tags=["rl"])
    async def rl_plan(request: Request, body: Any = Body(...), background: bool = background_flag) -> JSONOut:
        """`shardwise rl plan JOB --format json`: colocated vs split pools, rollout TP, training plan and mode,
        ranked by samples/s, with the rejected candidates and why."""
        return await queued(request, "rl/plan", body, background)

    @app.get("/api/rl/examples", tags=["rl"])
    async def rl_examples() -> JSONOut:
        """The RL example jobs of the source tree (examples/rl-*.yaml), by name; empty where Shardwise is
        installed without them."""
        return JSONOut(rl_example_jobs())

    @app.get("/api/jobs/{job_id}", tags=["jobs"])
    async def job_state(job_id: str) -> JSONOut:
        """A queued job: state, progress, queue position; the result (or error) once it ends."""
        job = jobs.get(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r} (finished jobs are kept for {settings.limits.keep_s:g} s)")
        return JSONOut(jobs.snapshot(job))

    @app.get("/api/jobs/{job_id}/events", tags=["jobs"])
    async def job_events(job_id: str) -> Any:
        """Server-sent events: the job's state each time it changes, the last one with the result."""
        job = jobs.get(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r}")

        async def stream():
            last = None
            while True:
                snap = jobs.snapshot(job, with_result=False)
                done = snap["state"] in ("done", "failed", "cancelled")
                if done:
                    snap = jobs.snapshot(job)
                text = json.dumps(finite(snap), separators=(",", ":"))
                if text != last:
                    yield f"data: {text}\n\n"
                    last = text
                if done:
                    return
                await asyncio.sleep(0.2)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    @app.delete("/api/jobs/{job_id}", tags=["jobs"])
    async def job_cancel(job_id: str) -> JSONOut:
        """Cancel a job (a running search is stopped within a tenth of a second)."""
        job = jobs.cancel(job_id)
        if job is None:
            return _error(404, f"no job {job_id!r}")
        return JSONOut(jobs.snapshot(job, with_result=False))

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    @app.get("/vendor/plotly.min.js", include_in_schema=False)
    async def plotly_js() -> Any:
        """plotly.js as shipped inside the `plotly` wheel (the web extra): no CDN, no build step."""
        spec = importlib.util.find_spec("plotly")
        path = Path(list(spec.submodule_search_locations)[0]) / "package_data" / "plotly.min.js" if spec else None
        if path is None or not path.exists():
            return PlainTextResponse("plotly is not installed: pip install 'shardwise[web]'", status_code=404)
        return FileResponse(path, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app
