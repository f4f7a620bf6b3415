"""`mfu` means one thing everywhere: JSON and CSV call the full-attention figure `mfu` and the causal one
`mfu_causal` (FLOP_CONVENTIONS), tables and the web page head them `MFU (non-causal)` / `MFU (causal)`,
and every figure is over the dense BF16 peak, for one GPU type or several."""

import json
import re
from pathlib import Path

import pytest

from shardwise.cli.main import main
from shardwise.cost.flops import model_flops_per_token
from shardwise.specs.job import job_from_mapping
from shardwise.specs.model_ref import load_model
from shardwise.train.estimate import estimate
from shardwise.train.hetero.estimate import hetero_estimate
from shardwise.train.result import FLOP_CONVENTIONS, MFU_LABELS

ROOT = Path(__file__).resolve().parents[2]
KNOBS = {"tp": 8, "micro_batch": 1, "schedule": "1f1b", "zero": 1, "recompute": "selective"}


def _training(precision):
    return {"seq_len": 4096, "global_batch": 64, "precision": precision}


def test_estimate_json_and_table_name_both_conventions(capsys):
    job = str(ROOT / "examples" / "llama3.1-70b-64xh100.yaml")
    assert main(["train", "estimate", job, "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d["flop_conventions"]) >= {"mfu", "mfu_causal", "hfu"}
    assert d["mfu_causal"] < d["mfu"]  # the full square counts more attention FLOPs
    assert main(["train", "estimate", job]) == 0
    table = capsys.readouterr().out
    assert f"{d['mfu_causal']:.1%}" in table.split(MFU_LABELS["mfu_causal"])[1].splitlines()[0]
    assert f"{d['mfu']:.1%}" in table.split(MFU_LABELS["mfu"])[1].splitlines()[0]


def test_hetero_mfu_is_the_homogeneous_one_on_one_gpu_type():
    """Two groups of H100s with the even split: the same mfu and mfu_causal as `train estimate`."""
    same = [{"name": "a", "gpu": "h100-sxm", "nodes": 2}, {"name": "b", "gpu": "h100-sxm", "nodes": 2}]
    h = hetero_estimate(job_from_mapping({"model": "llama-3.1-8b", "cluster": {"groups": same},
                                          "training": _training("bf16"),
                                          "parallel": KNOBS | {"stage_groups": ["a", "b"], "dp": 2, "layer_split": [16, 16]}}))
    flat = estimate(job_from_mapping({"model": "llama-3.1-8b", "cluster": {"gpu": "h100-sxm", "gpus": 32},
                                      "training": _training("bf16"), "parallel": KNOBS | {"pp": 2, "dp": 2}}))
    assert h.mfu == pytest.approx(flat.mfu, rel=1e-9)
    assert h.mfu_causal == pytest.approx(flat.mfu_causal, rel=1e-9)


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_hetero_json_and_table_carry_both_figures_over_the_bf16_peak(precision):
    groups = [{"name": "h100", "gpu": "h100-sxm", "nodes": 2}, {"name": "a100", "gpu": "a100-80gb", "nodes": 2}]
    if precision == "fp8":
        groups[1]["gpu"] = "h200"  # fp8 GEMMs need Hopper or newer in both groups
    job = job_from_mapping({"model": "llama-3.1-8b", "cluster": {"groups": groups}, "training": _training(precision),
                            "parallel": KNOBS | {"stage_groups": [g["name"] for g in groups], "dp": 2}})
    h = hetero_estimate(job)
    d = h.to_dict()
    m = load_model("llama-3.1-8b")
    peak = sum(g.cluster.num_gpus * g.gpu.peak_flops("bf16") for g in job.cluster.groups)  # both groups' BF16 peaks
    assert d["mfu"] == pytest.approx(h.tokens_per_s * model_flops_per_token(m, 4096) / peak, rel=1e-12)
    assert d["mfu_causal"] == pytest.approx(h.tokens_per_s * model_flops_per_token(m, 4096, causal=True) / peak, rel=1e-12)
    assert d["flop_conventions"] == {k: FLOP_CONVENTIONS[k] for k in ("mfu", "mfu_causal")}
    from rich.console import Console

    from shardwise.train.hetero.report import hetero_table

    console = Console(record=True, width=200)
    console.print(hetero_table(h))
    text = console.export_text()
    for key in ("mfu", "mfu_causal"):
        assert f"{d[key]:.1%}" in next(line for line in text.splitlines() if MFU_LABELS[key] in line)


def test_sweep_rows_use_the_json_names():
    from shardwise.train.sweep import COLUMNS, plan_one

    assert {"mfu", "mfu_causal"} <= set(COLUMNS)
    row = plan_one({"job": 0, "model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 8}, "seq_len": 4096,
                    "global_batch": 32, "objective": "throughput", "schedules": ["1f1b"], "max_memory_gib": None,
                    "precision": "bf16"})
    assert row["error"] is None and 0 < row["mfu_causal"] < row["mfu"] < 1


def test_the_web_page_heads_mfu_with_its_convention():
    """Every MFU heading the web page writes is one of the tables' labels, and shows the key it names."""
    js = (ROOT / "src" / "shardwise" / "web" / "static" / "app.js").read_text()
    heads = re.findall(r'"(MFU[^"]*)"', js)
    assert heads and set(heads) <= set(MFU_LABELS.values()), heads
    cards = re.findall(r'card\("(MFU[^"]*)", fmt\.pct\(e\.(\w+)\)', js)
    assert cards and all(MFU_LABELS[key] == label for label, key in cards), cards
