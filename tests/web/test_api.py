"""The HTTP API returns what the CLI prints with --format json, and the CLI's one-line message on bad input."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from shardwise.cli.main import main
from tests.web.conftest import cli_error, cli_json

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "llama3.1-70b-64xh100.yaml"
SMALL_JOB = {"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 8},
             "training": {"seq_len": 4096, "global_batch": 64, "tokens": 1e12},
             "parallel": {"tp": 2, "pp": 2, "schedule": "zbv", "micro_batch": 1}}


def _untimed(d: dict) -> dict:
    """A search result without its wall-clock figures (which differ between any two runs)."""
    d = copy.deepcopy(d)
    for s in d.get("searches", []):
        s.pop("seconds"), s.pop("screened_plans_per_s")
    if "search" in d:
        d["search"].pop("seconds")
    return d


def _write(tmp_path: Path, doc: Any, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return str(path)


# --- one code path: each endpoint equals the CLI --------------------------------------------------------

def test_train_estimate_equals_cli(client, capsys, tmp_path):
    doc = yaml.safe_load(EXAMPLE.read_text())
    assert client.post("/api/train/estimate", json=doc).json() == cli_json(capsys, "train", "estimate", str(EXAMPLE))
    both = [SMALL_JOB, doc]
    r = client.post("/api/train/estimate", json=both)
    assert r.status_code == 200 and r.json() == cli_json(capsys, "train", "estimate", _write(tmp_path, both))
    per_rank = r.json()[0]["memory_per_rank_parts_gib"]
    assert len(per_rank) == 2  # one breakdown per pipeline rank; its parts sum to the rank's total
    assert [sum(p.values()) for p in per_rank] == pytest.approx(r.json()[0]["memory_per_rank_gib"])


def test_train_estimate_of_a_pasted_config_json(client, capsys, data_dir, tmp_path):
    path = data_dir / "hf" / "mistral-7b.json"
    doc = dict(SMALL_JOB, model=str(path), parallel={"tp": 1, "pp": 1})
    via_cli = cli_json(capsys, "train", "estimate", _write(tmp_path, doc))
    pasted = client.post("/api/train/estimate", json=dict(doc, model=json.loads(path.read_text()))).json()
    assert {k: v for k, v in pasted.items() if k not in ("name", "model")} == \
           {k: v for k, v in via_cli.items() if k not in ("name", "model")}


PLAN_ARGS = ["--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "8", "--seq-len", "2048", "--global-batch", "32",
             "--schedules", "1f1b,zbv", "--top", "3", "--tokens", "1e11"]
PLAN_BODY = {"model": "llama-3.1-8b", "gpu": "h100", "gpus": 8, "seq_len": 2048, "global_batch": 32,
             "schedules": "1f1b,zbv", "top": 3, "tokens": 1e11}


def test_train_plan_equals_cli(client, capsys):
    r = client.post("/api/train/plan", json=PLAN_BODY)
    assert r.status_code == 200, r.text
    assert _untimed(r.json()) == _untimed(cli_json(capsys, "train", "plan", *PLAN_ARGS))


def test_train_plan_will_it_fit_equals_cli(client, capsys):
    """Without a GPU count the API sizes the cluster as the CLI does; when nothing fits it falls back to offload
    and reports the closest plans and the levers, as the CLI does."""
    sized = {"model": "llama-3.1-70b", "gpu": "l40s", "seq_len": 2048, "global_batch": 16, "top": 1}
    r = client.post("/api/train/plan", json=sized)
    assert r.status_code == 200, r.text
    cli = cli_json(capsys, "train", "plan", "--model", "llama-3.1-70b", "--gpu", "l40s", "--seq-len", "2048",
                   "--global-batch", "16", "--top", "1")
    assert r.json()["smallest_clusters"]["per_gpu"][0]["gpus"] == cli["smallest_clusters"]["per_gpu"][0]["gpus"]
    assert _untimed(r.json()) == _untimed(cli)
    offload = {"model": "llama-3.1-8b", "gpu": "a100-40gb", "gpus": 2, "seq_len": 2048, "global_batch": 16, "top": 1}
    r = client.post("/api/train/plan", json=offload)
    assert r.status_code == 200, r.text
    cli = cli_json(capsys, "train", "plan", "--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--gpus", "2", "--seq-len",
                   "2048", "--global-batch", "16", "--top", "1")
    assert r.json()["what_to_change"] == cli["what_to_change"] and r.json()["what_to_change"]["searched_with_offload"]


def test_train_plan_from_a_job_document_equals_cli(client, capsys, tmp_path):
    doc = {**SMALL_JOB, "parallel": {"schedule": "1f1b", "zero": 1}}
    r = client.post("/api/train/plan", json={"job": doc, "top": 2, "gpu": ["a100-80gb", "l40s"]})  # gpu ignored, as in the CLI
    assert r.status_code == 200, r.text
    assert _untimed(r.json()) == _untimed(cli_json(capsys, "train", "plan", _write(tmp_path, doc), "--top", "2"))


MOE_PLAN_ARGS = ["--model", "mixtral-8x7b", "--gpu", "h100", "--gpus", "16", "--seq-len", "2048", "--global-batch", "32",
                 "--precision", "fp8", "--schedules", "1f1b", "--top", "2", "--exact-budget", "8"]
MOE_PLAN_BODY = {"model": "mixtral-8x7b", "gpu": "h100", "gpus": 16, "seq_len": 2048, "global_batch": 32, "precision": "fp8",
                 "schedules": "1f1b", "top": 2, "exact_budget": 8}


def test_train_plan_with_recipes_and_dispatchers_equals_cli(client, capsys):
    """--fp8-recipes and --moe-dispatchers as fields: a list or a comma-separated string, as the CLI's flags."""
    r = client.post("/api/train/plan", json={**MOE_PLAN_BODY, "fp8_recipes": ["rowwise", "delayed"],
                                             "moe_dispatchers": "alltoall,deepep"})
    assert r.status_code == 200, r.text
    out = r.json()
    assert _untimed(out) == _untimed(cli_json(capsys, "train", "plan", *MOE_PLAN_ARGS, "--fp8-recipes", "rowwise,delayed",
                                              "--moe-dispatchers", "alltoall", "--moe-dispatchers", "deepep"))
    assert {p["plan"]["fp8_recipe"] for p in out["pareto_front"]} <= {"rowwise", "delayed"}
    assert {p["plan"]["moe_dispatcher"] for p in out["pareto_front"]} <= {"alltoall", "deepep"}


def test_train_plan_recipe_and_dispatcher_errors_are_the_clis(client, capsys):
    cases = [({"fp8_recipes": "rowwise,nvfp4"}, ["--fp8-recipes", "rowwise,nvfp4"]),
             ({"moe_dispatchers": ["nccl"]}, ["--moe-dispatchers", "nccl"]),
             ({"fp8_recipes": "rowwise", "precision": "bf16"}, ["--fp8-recipes", "rowwise", "--precision", "bf16"])]
    for change, flags in cases:
        r = client.post("/api/train/plan", json={**MOE_PLAN_BODY, **change})
        assert (r.status_code, r.json()["detail"]) == (422, cli_error(capsys, "train", "plan", *MOE_PLAN_ARGS, *flags)), change
    r = client.post("/api/train/plan", json={**MOE_PLAN_BODY, "fp8_recipes": [1, 2]})
    assert r.status_code == 422 and r.json()["detail"].startswith("fp8_recipes")


def test_schedule_simulate_and_compare_equal_cli(client, capsys, tmp_path):
    body = {"schedule": "interleaved", "pp": 4, "microbatches": 8, "vpp": 2, "f": "1,1,1,1.2,1,1,1,1.2", "i": 1.3,
            "w": [0.6] * 8, "comm": 0.05}
    args = ["schedule", "simulate", "--schedule", "interleaved", "--pp", "4", "--microbatches", "8", "--vpp", "2",
            "--f", "1,1,1,1.2,1,1,1,1.2", "--i", "1.3", "--w", ",".join(["0.6"] * 8), "--comm", "0.05", "--timeline"]
    assert client.post("/api/schedule/simulate", json=body).json() == cli_json(capsys, *args)  # the page draws the timeline
    csv_path = tmp_path / "zb.csv"
    assert main_ok(capsys, "schedule", "export", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8", "-o", str(csv_path))
    uploaded = client.post("/api/schedule/simulate", json={"csv": csv_path.read_text(), "i": 1.2}).json()
    assert uploaded == cli_json(capsys, "schedule", "import", str(csv_path), "--i", "1.2", "--timeline") | {"schedule": "uploaded"}
    compare = {"pp": 4, "microbatches": 12, "f": 1, "i": 1.3, "w": 0.6, "schedules": "1f1b,zbv,zb-h2,v-min"}
    assert client.post("/api/schedule/compare", json=compare).json() == cli_json(
        capsys, "schedule", "compare", "--pp", "4", "--microbatches", "12", "--i", "1.3", "--w", "0.6",
        "--schedules", "1f1b,zbv,zb-h2,v-min")


def main_ok(capsys: pytest.CaptureFixture[str], *argv: str) -> bool:
    ok = main(list(argv)) == 0
    capsys.readouterr()
    return ok


SERVE_JOB = {"model": "llama-3.1-8b", "precision": "bf16", "deployment": {"gpu": "a100-80gb", "tp": 1, "replicas": 2},
             "workload": {"arrival": "poisson", "rate": 6, "num_requests": 300, "input_len": {"dist": "sharegpt"},
                          "output_len": 128, "seed": 1},
             "slo": {"ttft_ms": 300, "tpot_ms": 50}}


def test_serve_simulate_equals_cli(client, capsys, tmp_path):
    expected = cli_json(capsys, "serve", "simulate", _write(tmp_path, SERVE_JOB))
    assert client.post("/api/serve/simulate", json=SERVE_JOB).json() == expected
    with_plot = client.post("/api/serve/simulate?plot=true", json=SERVE_JOB).json()
    cdfs = with_plot.pop("plot")["cdf"]
    assert with_plot == expected
    assert [c["metric"] for c in cdfs] == ["ttft", "tpot", "itl", "e2e"]
    for c in cdfs:  # an empirical CDF: sorted values, fractions rising to 1; its median is the JSON's median
        assert c["ms"] == sorted(c["ms"]) and c["fraction"] == sorted(c["fraction"]) and c["fraction"][-1] == pytest.approx(1.0)
    ttft = cdfs[0]
    median = next(ms for ms, f in zip(ttft["ms"], ttft["fraction"], strict=True) if f >= 0.5)
    assert median == pytest.approx(expected["ttft_ms"]["median"], rel=0.05)
    assert cdfs[0]["slo_ms"] == 300 and cdfs[2]["slo_ms"] is None


def test_serve_simulate_with_adapters_equals_cli(client, capsys):
    path = ROOT / "examples" / "serve-llama2-7b-lora.yaml"
    doc = yaml.safe_load(path.read_text())
    got = client.post("/api/serve/simulate", json=doc).json()
    assert got == cli_json(capsys, "serve", "simulate", str(path)) and got["adapters"]["count"] == 1000


def test_serve_simulate_with_an_uploaded_trace_equals_cli(client, capsys):
    trace = ROOT / "examples" / "serve-azure-trace.yaml"
    doc = yaml.safe_load(trace.read_text())
    csv_text = (trace.parent / doc["workload"]["path"]).read_text()
    body = {**doc, "workload": {k: v for k, v in doc["workload"].items() if k != "path"}, "trace_csv": csv_text}
    assert client.post("/api/serve/simulate", json=body).json() == cli_json(capsys, "serve", "simulate", str(trace))


@pytest.mark.parametrize("flags, fields", [
    (["--gpu-mix", "a100-80gb:2"], {"gpu_mix": "a100-80gb:2"}),
    (["--gpu", "a100-80gb", "--gpus", "2"], {"gpu": "a100-80gb", "gpus": 2}),  # gpus: a count, as on the CLI
])
def test_serve_plan_equals_cli(client, capsys, flags, fields):
    """The API's serve plan fields are the CLI's flags (docs/web.md): gpu, gpus as a count, gpu_mix."""
    args = ["serve", "plan", "--model", "llama-3.1-8b", "--rate", "4", "--slo-ttft-ms", "800", "--slo-tpot-ms", "80",
            *flags, "--no-mix", "--no-disagg", "--num-requests", "100"]
    body = {"model": "llama-3.1-8b", "rate": 4, "slo_ttft_ms": 800, "slo_tpot_ms": 80, **fields,
            "mix": False, "disaggregation": False, "num_requests": 100}
    r = client.post("/api/serve/plan?plot=true", json=body)
    assert r.status_code == 200, r.text
    out = r.json()
    curves = out.pop("plot")
    assert _untimed(out) == _untimed(cli_json(capsys, *args))
    assert curves["chosen"]["usd_per_hour"] == out["chosen"]["usd_per_hour"]


# --- bad input: HTTP 422 with the CLI's one line, never a 500 ------------------------------------------

def test_estimate_errors_are_the_clis(client, capsys, tmp_path):
    for change in ({"parallel": {"tp": 3}}, {"cluster": {"gpu": "h1000", "gpus": 8}}, {"training": {"seq_len": -1, "global_batch": 8}},
                   {"model": "llama-9"}, {"parallel": {"tp": 2, "bogus": 1}}):
        doc = {**SMALL_JOB, **change}
        r = client.post("/api/train/estimate", json=doc)
        assert r.status_code == 422
        assert r.json() == {"detail": cli_error(capsys, "train", "estimate", _write(tmp_path, doc))}


def test_plan_schedule_and_serve_errors_are_the_clis(client, capsys):
    cases = [
        ("/api/train/plan", {"model": "llama-3.1-8b", "gpu": "h100"}, ["train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100"]),
        ("/api/train/plan", {**PLAN_BODY, "objective": "speed"}, ["train", "plan", *PLAN_ARGS, "--objective", "speed"]),
        ("/api/train/plan", {**PLAN_BODY, "seq_len": -5}, ["train", "plan", *PLAN_ARGS[:6], "--seq-len", "-5", "--global-batch", "32"]),
        ("/api/schedule/simulate", {"schedule": "zb-h9"}, ["schedule", "simulate", "--schedule", "zb-h9"]),
        ("/api/schedule/simulate", {"schedule": "1f1b", "f": "1,x"}, ["schedule", "simulate", "--f", "1,x"]),
        ("/api/schedule/simulate", {"schedule": "zbv", "mem_cap": 2}, ["schedule", "simulate", "--schedule", "zbv", "--mem-cap", "2"]),
        ("/api/serve/plan", {"model": "llama-3.1-8b", "rate": 4, "slo_ttft_ms": 300, "gpus": "h100:x"},
         ["serve", "plan", "--model", "llama-3.1-8b", "--rate", "4", "--slo-ttft-ms", "300", "--gpus", "h100:x"]),
        ("/api/serve/plan", {"model": "llama-3.1-8b", "rate": 4}, ["serve", "plan", "--model", "llama-3.1-8b", "--rate", "4"]),
    ]
    for path, body, argv in cases:
        r = client.post(path, json=body)
        assert (r.status_code, r.json()["detail"]) == (422, cli_error(capsys, *argv)), path


def test_serve_simulate_error_is_the_clis(client, capsys, tmp_path):
    doc = {**SERVE_JOB, "workload": {**SERVE_JOB["workload"], "rate": -2}}
    r = client.post("/api/serve/simulate", json=doc)
    assert r.status_code == 422
    assert r.json()["detail"] == cli_error(capsys, "serve", "simulate", _write(tmp_path, doc)).replace(str(tmp_path / "job.yaml"), "job")


def test_malformed_bodies_are_one_line_422s(client):
    for content in (b"{bad", b"", b"[1, 2", b"null", b"42", b'"text"', b"[]"):
        for path in ("/api/train/estimate", "/api/train/plan", "/api/serve/simulate", "/api/schedule/simulate"):
            r = client.post(path, content=content, headers={"content-type": "application/json"})
            assert r.status_code == 422, (path, content, r.text)
            assert isinstance(r.json()["detail"], str) and "\n" not in r.json()["detail"]


def test_the_server_reads_no_file_a_request_names(client):
    r = client.post("/api/train/estimate", json={**SMALL_JOB, "model": str(EXAMPLE)})
    assert r.status_code == 422 and "unknown model" in r.json()["detail"]
    r = client.post("/api/train/estimate", json={**SMALL_JOB, "model": "/etc/hostname"})
    assert r.status_code == 422 and "unknown model" in r.json()["detail"]
    r = client.post("/api/serve/simulate", json={**SERVE_JOB, "workload": {"arrival": "trace", "path": "/etc/passwd"}})
    assert r.status_code == 422 and r.json()["detail"].startswith("workload.path: the web API reads no file")
    r = client.post("/api/serve/plan", json={"job": {**SERVE_JOB, "workload": {"arrival": "trace", "path": "x.csv"}}, "rate": 1,
                                             "slo_ttft_ms": 300})
    assert r.status_code == 422 and r.json()["detail"].startswith("job.workload.path:")


def test_requests_are_bounded(client):
    huge = {**SMALL_JOB, "training": {"seq_len": 4096, "global_batch": 2**40}, "parallel": {"tp": 1, "pp": 8}}
    r = client.post("/api/train/estimate", json=huge)
    assert r.status_code == 422 and "the web planner simulates at most" in r.json()["detail"]
    r = client.post("/api/schedule/simulate", json={"pp": 64, "microbatches": 4096})
    assert r.status_code == 422 and r.json()["detail"].startswith("microbatches:")
    r = client.post("/api/train/plan", json={**PLAN_BODY, "top": 500})
    assert r.status_code == 422 and r.json()["detail"].startswith("top:")
    big = client.post("/api/train/estimate", content=b" " * (33 * 2**20), headers={"content-type": "application/json"})
    assert big.status_code == 413


def test_train_export_equals_cli(client, capsys, tmp_path):
    plans = {"megatron": {"tp": 2, "pp": 2, "zero": 1}, "torchtitan": {"tp": 2, "pp": 2, "zero": 2}, "deepspeed": {"tp": 1, "pp": 1, "zero": 2}}
    for to, fmt in (("megatron", "args"), ("torchtitan", "script"), ("deepspeed", "file")):
        path = _write(tmp_path, SMALL_JOB | {"parallel": plans[to] | {"schedule": "1f1b"}}, f"{to}.yaml")
        body = {"job": yaml.safe_load(open(path)), "to": to, "format": fmt}
        r = client.post("/api/train/export", json=body)
        assert r.status_code == 200, r.text
        capsys.readouterr()
        out = tmp_path / f"out-{to}"
        assert main(["train", "export", path, "--to", to, "--format", fmt, "-o", str(out)]) == 0
        assert r.json()["text"] == out.read_text() and r.json()["engine"] == to
    refused = {"job": SMALL_JOB | {"parallel": {"tp": 2, "pp": 2, "schedule": "zbv"}}, "to": "megatron"}
    r = client.post("/api/train/export", json=refused)
    bad = _write(tmp_path, refused["job"], "zbv.yaml")
    assert (r.status_code, r.json()["detail"]) == (422, cli_error(capsys, "train", "export", bad, "--to", "megatron"))


# --- the job queue: background jobs, progress, events, cancellation, limits -------------------------------

def _wait(client: TestClient, job_id: str, states: tuple[str, ...] = ("done", "failed", "cancelled"),
          timeout_s: float = 120.0) -> dict:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        snap = client.get(f"/api/jobs/{job_id}").json()
        if snap["state"] in states:
            return snap
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {snap['state']} after {timeout_s} s")


def test_background_job_reports_and_ends_with_the_result(client):
    r = client.post("/api/train/plan?background=true", json=PLAN_BODY)
    assert r.status_code == 202
    job = r.json()
    assert job["state"] in ("queued", "running") and job["poll"] == f"/api/jobs/{job['id']}"
    events = []
    with client.stream("GET", job["events"]) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert events[-1]["state"] == "done" and events[-1]["result"]["top"]
    assert all(e["state"] in ("queued", "running") for e in events[:-1])
    assert _wait(client, job["id"])["result"] == events[-1]["result"]
    assert client.get("/api/jobs/nope").status_code == 404


def test_a_running_search_can_be_cancelled(client):
    body = {"model": "llama-3.1-405b", "gpu": ["h100", "a100-80gb"], "gpus": 16384, "seq_len": 8192, "global_batch": 2048}
    job = client.post("/api/train/plan?background=true", json=body).json()
    _wait(client, job["id"], states=("running",))
    gone = client.delete(f"/api/jobs/{job['id']}").json()
    assert gone["id"] == job["id"]
    snap = _wait(client, job["id"], timeout_s=10)
    assert snap["state"] == "cancelled" and snap["status"] == 409
    # the next search starts on a fresh worker and succeeds
    assert client.post("/api/train/plan", json=PLAN_BODY).status_code == 200


def test_time_limit_and_full_queue():
    from fastapi.testclient import TestClient

    from shardwise.web.app import WebSettings, create_app
    from shardwise.web.jobs import Limits

    app = create_app(WebSettings(limits=Limits(time_limit_s=1.0, max_waiting=1)))
    slow = {"model": "llama-3.1-405b", "gpu": ["h100", "a100-80gb", "h200"], "gpus": 16384, "seq_len": 8192, "global_batch": 2048}
    with TestClient(app) as c:
        first = c.post("/api/train/plan?background=true", json=slow).json()
        _wait(c, first["id"], states=("running", "failed"))
        second = c.post("/api/train/plan?background=true", json=slow)
        third = c.post("/api/train/plan", json=slow)
        assert second.status_code == 202
        assert third.status_code == 503 and "retry" in third.json()["detail"] and third.headers["retry-after"]
        failed = _wait(c, first["id"])
        assert failed["state"] == "failed" and failed["status"] == 422 and "limit of 1 s" in failed["error"]
        c.delete(f"/api/jobs/{second.json()['id']}")


# --- meta ----------------------------------------------------------------------------------------------

def test_health_catalog_docs_and_page(client):
    assert client.get("/api/health").json()["status"] == "ok"
    cat = client.get("/api/catalog").json()
    assert "llama-3.1-70b" in [m["name"] for m in cat["models"]] and "H100-SXM" in [g["name"] for g in cat["gpus"]]
    assert {"1f1b", "zbv", "auto"} <= {s["name"] for s in cat["schedules"]}
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/api/train/estimate", "/api/train/plan", "/api/schedule/simulate", "/api/serve/simulate", "/api/serve/plan",
              "/api/train/export", "/api/catalog", "/api/health"):
        assert p in paths
    assert "TrainJobDocument" in client.get("/openapi.json").json()["components"]["schemas"]
    assert client.get("/docs").status_code == 200
    page = client.get("/")
    assert page.status_code == 200 and "Shardwise" in page.text
    for asset in ("/static/app.js", "/static/style.css"):
        assert client.get(asset).status_code == 200
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code in (200, 404) and (js.status_code == 404 or len(js.content) > 1_000_000)


def test_train_estimate_of_a_cluster_with_groups_equals_cli(client, capsys):
    hetero = ROOT / "examples" / "hetero-h100-a100.yaml"
    r = client.post("/api/train/estimate", json=yaml.safe_load(hetero.read_text()))
    assert r.status_code == 200 and r.json() == cli_json(capsys, "train", "estimate", str(hetero))
    assert r.json()["gpus_per_group"] == {"h100": 64, "a100": 128}
    body = {"job": {k: v for k, v in yaml.safe_load(hetero.read_text()).items() if k != "parallel"}}
    refused = client.post("/api/train/plan", json=body)
    assert refused.status_code in (400, 422) and "cluster.groups" in refused.text


# --- RL post-training -----------------------------------------------------------------------------------

RL_EXAMPLE = ROOT / "examples" / "rl-grpo-llama3.1-8b-64xh100.yaml"


def _rl_untimed(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "seconds"}


def test_rl_estimate_equals_cli(client, capsys, tmp_path):
    doc = yaml.safe_load(RL_EXAMPLE.read_text())
    r = client.post("/api/rl/estimate", json=doc)
    assert r.status_code == 200, r.text
    assert r.json() == cli_json(capsys, "rl", "estimate", str(RL_EXAMPLE))
    split = {**doc, "placement": {"kind": "split", "rollout_gpus": 32, "mode": "one_step_off"}}
    queued = client.post("/api/rl/estimate?background=true", json=split)  # the same answer through the job queue
    assert queued.status_code == 202
    done = _wait(client, queued.json()["id"])
    assert done["state"] == "done" and done["result"] == cli_json(capsys, "rl", "estimate", _write(tmp_path, split))
    assert {s["pool"] for s in done["result"]["timeline"]} == {"rollout", "train"}


def test_rl_plan_equals_cli(client, capsys):
    doc = yaml.safe_load(RL_EXAMPLE.read_text())
    r = client.post("/api/rl/plan", json={"job": doc, "top": 3, "max_staleness": 0})
    assert r.status_code == 200, r.text
    expected = cli_json(capsys, "rl", "plan", str(RL_EXAMPLE), "--top", "3", "--max-staleness", "0")
    assert _rl_untimed(r.json()) == _rl_untimed(expected)
    assert len(r.json()["ranked"]) == 3 and r.json()["rejected"]  # off-policy candidates rejected by the staleness limit


def test_rl_errors_are_the_clis(client, capsys, tmp_path):
    doc = yaml.safe_load(RL_EXAMPLE.read_text())
    for change in ({"policy": "llama-9"}, {"placement": {"kind": "split"}}, {"critic": True},
                   {"rollout": {"output_len": {"dist": "sharegpt"}}}, {"algorithm": {"name": "dpo"}}, {"cluster": {"gpu": "h1000", "gpus": 8}}):
        bad = {**doc, **change}
        r = client.post("/api/rl/estimate", json=bad)
        assert (r.status_code, r.json()["detail"]) == (422, cli_error(capsys, "rl", "estimate", _write(tmp_path, bad))), change
    bad = {**doc, "reference": "llama-9"}
    r = client.post("/api/rl/plan", json={"job": bad})
    assert (r.status_code, r.json()["detail"]) == (422, cli_error(capsys, "rl", "plan", _write(tmp_path, bad)))
    r = client.post("/api/rl/plan", json={"job": doc, "max_staleness": 99})
    assert (r.status_code, r.json()["detail"]) == (422, cli_error(capsys, "rl", "plan", str(RL_EXAMPLE), "--max-staleness", "99"))
    assert client.post("/api/rl/plan", json={"job": doc, "top": 0}).json()["detail"].startswith("top:")
    for body in ([], {"policy": "llama-3.1-8b"}, {**doc, "policy": "/etc/hostname"}):
        r = client.post("/api/rl/estimate", json=body)
        assert r.status_code == 422 and isinstance(r.json()["detail"], str)
    assert "unknown model" in client.post("/api/rl/estimate", json={**doc, "policy": "/etc/hostname"}).json()["detail"]
    huge = {**doc, "algorithm": {"prompts_per_step": 100_000, "responses_per_prompt": 64}}
    r = client.post("/api/rl/estimate", json=huge)
    assert r.status_code == 422 and "the web planner simulates at most" in r.json()["detail"]


def test_rl_examples_and_docs(client):
    examples = client.get("/api/rl/examples").json()
    assert examples[RL_EXAMPLE.stem] == yaml.safe_load(RL_EXAMPLE.read_text())
    doc = client.get("/openapi.json").json()
    for p in ("/api/rl/estimate", "/api/rl/plan", "/api/rl/examples"):
        assert p in doc["paths"]
    assert doc["paths"]["/api/rl/plan"]["post"]["requestBody"]["content"]["application/json"]["schema"] == \
        {"$ref": "#/components/schemas/RLPlanBody"}
    assert {"RLJobSpec", "RLPlanBody", "AlgorithmSpec", "PlacementSpec"} <= set(doc["components"]["schemas"])


def test_a_long_rl_estimate_goes_through_the_queue(capsys):
    from fastapi.testclient import TestClient

    from shardwise.web.app import WebSettings, create_app

    app = create_app(WebSettings(inline_rl_tokens=0))  # every RL estimate is "long"
    doc = yaml.safe_load(RL_EXAMPLE.read_text())
    with TestClient(app) as c:
        r = c.post("/api/rl/estimate", json=doc)
        assert r.status_code == 200 and r.json() == cli_json(capsys, "rl", "estimate", str(RL_EXAMPLE))
        assert [j.task for j in app.state.jobs._jobs.values()] == ["rl/estimate"]
        assert c.post("/api/rl/estimate", json={**doc, "policy": "llama-9"}).status_code == 422  # checked before queueing
        assert len(app.state.jobs._jobs) == 1
