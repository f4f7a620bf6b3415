"""`train estimate --trace`: the estimated step as a Chrome/Perfetto trace that adds up to the estimate."""

import json

import yaml
from pytest import approx

from shardwise.cli.main import main
from shardwise.specs.job import load_jobs
from shardwise.train.estimate import estimate
from shardwise.train.result import GIB

EXAMPLE = "examples/llama3.1-70b-64xh100.yaml"
US = 1e6


def _variant(**parallel):
    doc = yaml.safe_load(open(EXAMPLE))
    doc["parallel"].update(parallel)
    return doc


def test_example_job_trace_ends_at_the_step_time(tmp_path, capsys, load_trace):
    path = tmp_path / "step.json"
    assert main(["train", "estimate", EXAMPLE, "--format", "json", "--trace", str(path)]) == 0
    est = json.loads(capsys.readouterr().out)
    (proc,) = load_trace(path).values()
    pp, m = est["plan"]["pp"], est["microbatches"]
    assert sorted(proc["threads"].values()) == [f"rank {r}" for r in range(pp)]
    for r in range(pp):
        kinds = [e["name"] for e in proc["slices"][r] if e["cat"] == "compute"]
        assert kinds.count("F") == kinds.count("B") == m  # 1F1B: one F and one fused B per micro-batch
        tail = [e for e in proc["slices"][r] if e["cat"] == "step"]
        assert tail[-1]["name"] == "step overhead" and tail[-1]["dur"] == approx(est["time_s"]["overhead"] * US, abs=1e-3)  # trace: 1 ns resolution
        series = next(v for k, v in proc["counters"].items() if k.startswith(f"rank {r} "))
        assert 0 < max(v for _, v in series) <= est["memory_per_rank_gib"][r]
    # 1F1B: the optimizer step synchronises the stages, the step is the global makespan plus its tail
    end = max(e["ts"] + e["dur"] for s in proc["slices"].values() for e in s)
    assert end == approx(est["step_time_s"] * US, rel=1e-9)


def test_zero_bubble_step_is_the_longest_rank_span_plus_the_tail(tmp_path, load_trace):
    doc = _variant(schedule="zbv", vpp=2)
    (est,) = [estimate(j) for j in load_jobs(_write(tmp_path, doc))]
    from shardwise.pipeline.trace import write_trace
    from shardwise.train.trace import estimate_trace

    (proc,) = load_trace(write_trace(estimate_trace([est]), tmp_path / "t.json")).values()
    spans = []
    for slices in proc["slices"].values():
        compute = [e for e in slices if e["cat"] == "compute"]
        spans.append(max(e["ts"] + e["dur"] for e in compute) - min(e["ts"] for e in compute))
    tail = est.time_s.straggler + est.time_s.dp_comm + est.time_s.optimizer + est.time_s.overhead
    assert max(spans) / US + tail == approx(est.step_time_s, rel=1e-9)
    assert {e["name"] for s in proc["slices"].values() for e in s if e["cat"] == "compute"} == {"F", "I", "W"}
    peak_gib = max(max(v for _, v in series) for series in proc["counters"].values())
    assert peak_gib * GIB <= est.memory.activations


def test_several_jobs_one_process_each(tmp_path, load_trace):
    jobs = [_variant(), _variant(pp=2, tp=8, schedule="zb-h1")]
    jobs[1]["name"] = "second"
    path = tmp_path / "t.json"
    assert main(["train", "estimate", _write(tmp_path, jobs), "--trace", str(path)]) == 0
    procs = load_trace(path)
    assert sorted(procs) == [1, 2] and "second" in procs[2]["name"]
    assert len(procs[1]["threads"]) == 4 and len(procs[2]["threads"]) == 2


def _write(tmp_path, doc):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)
