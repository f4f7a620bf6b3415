"""The page in a real browser: headless Chromium from the system packages, driven by Playwright through its
local executable (no browser download). Skipped, with the reason, when no Chromium is installed."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from typing import TYPE_CHECKING

import pytest

from tests.web.conftest import cli_json

if TYPE_CHECKING:
    from playwright.sync_api import Page

sync_api = pytest.importorskip("playwright.sync_api", reason="browser tests need playwright (the webtest extra)")
CHROMIUM = os.environ.get("SHARDWISE_CHROMIUM") or next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium found: apt-get install chromium (or set SHARDWISE_CHROMIUM)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """The app under uvicorn on 127.0.0.1 in a thread."""
    import uvicorn

    from shardwise.web.app import create_app

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    t0 = time.monotonic()
    while not srv.started:
        assert time.monotonic() - t0 < 30, "the server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=15)


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def page(browser):
    pg = browser.new_page(viewport={"width": 1280, "height": 800})
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    pg.close()
    assert not errors, errors


def _open(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("body[data-ready]")


def _card(page: Page, key: str) -> float:
    return float(page.get_attribute(f"#train-estimate-out .card[data-key='{key}']", "data-value"))


JOB = "examples/llama3.1-70b-64xh100.yaml"


def test_estimate_matches_the_cli_and_draws_the_timeline(server, page, capsys, tmp_path):
    import yaml

    job = yaml.safe_load(open(JOB))
    job["cluster"] = {"gpu": "H100-SXM", "gpus": 64}  # the form leaves the node layout to the catalog
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    expected = cli_json(capsys, "train", "estimate", str(tmp_path / "job.yaml"))
    _open(page, f"{server}/?tab=train&model=llama-3.1-70b&gpu=H100-SXM&gpus=64&seq_len=8192&global_batch=512&tokens=15e12"
                "&tp=8&pp=4&vpp=1&dp=auto&zero=1&micro_batch=1&recompute=selective&schedule=1f1b&sp=1&run=estimate")
    page.wait_for_selector("#train-est-timeline canvas")
    assert _card(page, "step_time_s") == pytest.approx(expected["step_time_s"], rel=1e-12)
    assert _card(page, "mfu_causal") == pytest.approx(expected["mfu_causal"], rel=1e-12)
    assert _card(page, "peak_memory_gib") == pytest.approx(expected["peak_memory_gib"], rel=1e-12)
    assert _card(page, "tokens_per_s_per_gpu") == pytest.approx(expected["tokens_per_s_per_gpu"], rel=1e-12)
    ranks = expected["memory_per_rank_parts_gib"]
    parts = len(ranks[0])  # weights, gradients, optimizer, activations, buffers, fragmentation, runtime
    assert len(ranks) == 4 and parts >= 5
    assert page.locator("#chart-memory .bars .point").count() == len(ranks) * parts  # stacked bars, one per part
    assert "run=estimate" in page.url and "tp=8" in page.url  # a shareable link


def test_offload_to_nvme_shows_host_memory_as_the_cli_does(server, page, capsys, tmp_path):
    (tmp_path / "job.yaml").write_text("model: llama-3.1-8b\ncluster: {gpu: H100-SXM, gpus: 8}\n"
                                       "training: {seq_len: 4096, global_batch: 8, precision: bf16}\n"
                                       "parallel: {zero: 3, offload: optimizer+params, offload_device: nvme}\n")
    expected = cli_json(capsys, "train", "estimate", str(tmp_path / "job.yaml"))
    _open(page, f"{server}/?tab=train&model=llama-3.1-8b&gpu=H100-SXM&gpus=8&seq_len=4096&global_batch=8"
                "&tp=1&pp=1&vpp=1&dp=auto&zero=3&micro_batch=1&recompute=selective&schedule=1f1b"
                "&offload=optimizer%2Bparams&offload_device=nvme&run=estimate")
    page.wait_for_selector("#train-estimate-out .card[data-key='host_dram_used_gib']")
    assert _card(page, "host_dram_used_gib") == pytest.approx(expected["host_memory"]["dram_used_gib"], rel=1e-12)
    assert _card(page, "step_time_s") == pytest.approx(expected["step_time_s"], rel=1e-12)
    assert "NVMe" in page.inner_text("#train-estimate-out")


def test_bad_input_shows_the_clis_message_on_the_field(server, page, capsys, tmp_path):
    import yaml

    job = yaml.safe_load(open(JOB))
    job["parallel"]["tp"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(job))
    capsys.readouterr()
    from shardwise.cli.main import main

    assert main(["train", "estimate", str(path)]) == 2
    message = capsys.readouterr().err.strip().removeprefix("error: ")
    _open(page, f"{server}/?tab=train")
    page.fill("#train-tp", "3")
    page.click("#train-estimate")
    page.wait_for_selector("#train-error:not([hidden])")
    assert page.inner_text("#train-error") == message
    assert "invalid" in page.get_attribute("#train-tp", "class")


def test_plan_matches_the_cli_and_a_click_opens_a_timeline(server, page, capsys):
    expected = cli_json(capsys, "train", "plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "16", "--seq-len", "4096",
                        "--global-batch", "128", "--top", "5")
    _open(page, f"{server}/?tab=train&model=llama-3.1-8b&gpu=H100-SXM&gpus=16&seq_len=4096&global_batch=128&tokens=&top=5&run=plan")
    page.wait_for_selector("#train-top-plans tbody tr", timeout=120_000)
    rows = page.locator("#train-top-plans tbody tr")
    assert rows.count() == len(expected["top"])
    for k, e in enumerate(expected["top"]):
        assert float(rows.nth(k).get_attribute("data-step")) == pytest.approx(e["step_time_s"], rel=1e-12)
    pipelined = next(k for k, e in enumerate(expected["top"]) if e["plan"]["pp"] > 1) if any(
        e["plan"]["pp"] > 1 for e in expected["top"]) else None
    if pipelined is not None:
        rows.nth(pipelined).click()
        page.wait_for_selector("#train-selected canvas")
    assert page.locator("#chart-front .scatterlayer .point").count() >= len(expected["pareto_front"])
    assert page.locator("#train-rejects tbody tr").count() == len(expected["searches"][0]["rejected"]) + 1


def test_plan_that_does_not_fit_shows_the_closest_plans_and_the_levers(server, page, capsys):
    expected = cli_json(capsys, "train", "plan", "--model", "llama-3.1-8b", "--gpu", "a100-40gb", "--gpus", "2", "--seq-len",
                        "2048", "--global-batch", "16", "--top", "1")
    _open(page, f"{server}/?tab=train&model=llama-3.1-8b&gpu=A100-40GB&gpus=2&seq_len=2048&global_batch=16&tokens=&top=1&run=plan")
    page.wait_for_selector("#train-levers tbody tr", timeout=120_000)
    advice = expected["what_to_change"]
    assert page.locator("#train-closest tbody tr").count() == len(advice["closest"])
    assert page.locator("#train-levers tbody tr").count() == len(advice["levers"])
    assert advice["searched_with_offload"] in page.locator("#train-fit h3").first.inner_text()
    assert "offload=" in page.locator("#train-top-plans tbody tr").first.inner_text()


def test_schedules_side_by_side_match_compare(server, page, capsys):
    expected = cli_json(capsys, "schedule", "compare", "--pp", "4", "--microbatches", "8", "--i", "1.5", "--w", "0.5",
                        "--schedules", "1f1b,interleaved,zb-h1,zbv")
    _open(page, f"{server}/?tab=schedule&pp=4&microbatches=8&vpp=2&f=1&i=1.5&w=0.5&comm=0&schedules=1f1b,interleaved,zb-h1,zbv&run=simulate")
    page.wait_for_selector("#sched-timelines canvas")
    assert page.locator("#sched-timelines .timeline").count() == 4
    for row in expected:
        shown = page.locator(f"#sched-timelines .timeline[data-schedule='{row['schedule']}']")
        assert float(shown.get_attribute("data-makespan")) == pytest.approx(row["makespan"], rel=1e-12)
        assert float(shown.get_attribute("data-bubble")) == pytest.approx(row["bubble_fraction"], rel=1e-12)


def test_serving_finds_a_deployment_and_draws_cdfs(server, page):
    _open(page, f"{server}/?tab=serve&model=llama-3.1-8b&rate=2&gpus=a100-80gb:1&disagg=0&mix=0&slo_ttft_ms=2000&slo_tpot_ms=100&run=plan")
    page.wait_for_selector("#serve-cdfs .chart .main-svg", timeout=120_000)
    assert page.locator("#serve-cdfs .chart").count() == 4
    assert "A100-80GB" in page.inner_text("#serve-table")


def test_phone_width_has_no_sideways_scroll(server, browser):
    pg = browser.new_page(viewport={"width": 390, "height": 844})
    _open(pg, f"{server}/?tab=train&run=estimate")
    pg.wait_for_selector("#train-est-timeline canvas")
    assert pg.evaluate("document.scrollingElement.scrollWidth") <= 390
    pg.close()


RL_EXAMPLE = "examples/rl-grpo-llama3.1-8b-64xh100.yaml"


def _rl_card(page: Page, key: str) -> float:
    return float(page.get_attribute(f"#rl-cards .card[data-key='{key}']", "data-value"))


def test_rl_estimate_of_the_example_matches_the_cli_and_draws_the_timeline(server, page, capsys):
    expected = cli_json(capsys, "rl", "estimate", RL_EXAMPLE)
    _open(page, f"{server}/?tab=rl&example=rl-grpo-llama3.1-8b-64xh100&run=estimate")
    page.wait_for_selector("#rl-timeline .main-svg")
    # the timeline: one bar per segment of the iteration, on each pool
    assert page.locator("#rl-timeline .bars .point").count() == len(expected["timeline"])
    assert int(page.get_attribute("#rl-timeline", "data-segments")) == len(expected["timeline"])
    for key in ("period_s", "samples_per_s", "generated_tokens_per_s", "trained_tokens_per_s"):
        assert _rl_card(page, key) == pytest.approx(expected[key], rel=1e-12), key
    for pool, idle in expected["gpu_idle_fraction"].items():
        assert _rl_card(page, f"idle:{pool}") == pytest.approx(idle, rel=1e-12, abs=1e-15)
    assert _rl_card(page, "train_need_gib") == pytest.approx(expected["memory"]["train"]["need_gib"], rel=1e-12)
    phases = page.locator("#rl-phases tbody tr")
    assert phases.count() == len(expected["phases_s"])
    for k, (phase, seconds) in enumerate(expected["phases_s"].items()):
        assert phases.nth(k).get_attribute("data-phase") == phase
        assert float(phases.nth(k).get_attribute("data-seconds")) == pytest.approx(seconds, rel=1e-12)
    train_mem = float(page.get_attribute("#rl-memory tr[data-phase='train']", "data-gib"))
    assert train_mem == pytest.approx(expected["memory"]["train"]["need_gib"], rel=1e-12)
    page.wait_for_selector("#rl-drain .main-svg")
    assert "tab=rl" in page.url and "run=estimate" in page.url


def test_rl_plan_ranks_the_placements_as_the_cli_does(server, page, capsys):
    expected = cli_json(capsys, "rl", "plan", RL_EXAMPLE, "--top", "3", "--max-staleness", "0")
    _open(page, f"{server}/?tab=rl&example=rl-grpo-llama3.1-8b-64xh100&top=3&max_staleness=0&run=plan")
    page.wait_for_selector("#rl-ranked tbody tr", timeout=120_000)
    rows = page.locator("#rl-ranked tbody tr")
    assert rows.count() == len(expected["ranked"]) == 3
    for k, c in enumerate(expected["ranked"]):
        assert float(rows.nth(k).get_attribute("data-samples-per-s")) == pytest.approx(c["samples_per_s"], rel=1e-12)
    assert page.locator("#rl-rejects tbody tr").count() == len(expected["rejected"]) > 0
    assert expected["rejected"][0]["reason"] in page.inner_text("#rl-rejects")
    page.wait_for_selector("#rl-timeline .main-svg")  # the chosen placement's iteration
    assert page.locator("#rl-timeline .bars .point").count() == len(expected["chosen"]["timeline"])


def test_rl_bad_job_shows_the_clis_message(server, page, capsys, tmp_path):
    import json

    import yaml

    doc = yaml.safe_load(open(RL_EXAMPLE))
    doc["placement"] = {"kind": "split"}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    from shardwise.cli.main import main

    assert main(["rl", "estimate", str(tmp_path / "bad.yaml")]) == 2
    message = capsys.readouterr().err.strip().removeprefix("error: ")
    _open(page, f"{server}/?tab=rl")
    page.evaluate("(text) => { document.querySelector('#rl-job').value = text; }", json.dumps(doc))
    page.click("#rl-estimate")
    page.wait_for_selector("#rl-error:not([hidden])")
    assert page.inner_text("#rl-error") == message


def test_rl_tab_at_phone_width_has_no_sideways_scroll(server, browser):
    pg = browser.new_page(viewport={"width": 390, "height": 844})
    _open(pg, f"{server}/?tab=rl&example=rl-grpo-llama3.1-8b-64xh100&run=estimate")
    pg.wait_for_selector("#rl-timeline .main-svg")
    assert pg.evaluate("document.scrollingElement.scrollWidth") <= 390
    pg.close()
