"""Validation against the calibration data: per-source errors, formula reproductions, the fit machinery."""

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from shardwise.calibration.fit import PARAMS, Problem, apply, base_constants, in_fit_scope
from shardwise.calibration.sources import sources
from shardwise.calibration.validate import collect_cases, load_records, run_validation
from shardwise.cli.main import main
from shardwise.cost.constants import default_constants, fit_cv_data, fitted_data


@pytest.fixture(scope="module")
def result():
    return run_validation()


def _rows(result, prefix, metric=None):
    return [r for r in result["rows"] if r.case.record_id.startswith(prefix) and (metric is None or r.case.metric == metric)]


def _korthikanti_table5_mae(result):
    rows = _rows(result, "korthikanti22_t5", "iteration_s")
    assert len(rows) == 8
    return sum(abs(r.error) for r in rows) / len(rows)


@pytest.mark.xfail(strict=True, reason="issue 9 target not met: one set of A100 constants fitted on every A100 "
                   "source predicts Korthikanti Table 5 1-12% too slow, 7.2% on average (docs/fidelity.md); remove this marker "
                   "when it passes")
def test_korthikanti_table5_iteration_time_within_5_percent(result):
    assert _korthikanti_table5_mae(result) <= 0.05


def test_korthikanti_table5_iteration_time_within_10_percent(result):
    """Regression guard near today's level (7.8%) until the 5% target above is met."""
    assert _korthikanti_table5_mae(result) <= 0.10


def test_zero_paper_memory_example_exact(result):
    rows = [r for r in result["rows"] if r.case.record_id == "zero_fig1_7p5B_64gpu"]
    assert len(rows) == 4
    for r in rows:  # the figure prints one decimal (1.875 GB is printed as 1.9)
        assert abs(r.predicted - r.case.measured) <= 0.05


def test_zero_bubble_table5_bubble_rates_reproduced(result):
    rows = [r for r in result["rows"] if r.case.metric.startswith("bubble_rate")]
    assert len(rows) == 18  # 6 settings x (1F1B, ZB-H1, ZB-H2): the reserved 14.6B/28.3B rows are not read
    assert all(abs(r.predicted - r.case.measured) <= 1e-3 for r in rows)
    assert all(r.case.category == "formula" for r in rows)


def test_reserved_rows_are_not_shipped():
    ids = {r["id"] for r in load_records()}
    assert not any(i.startswith("zb_") and ("14.6B" in i or "28.3B" in i) for i in ids)


_SHARED_TRAINING = next(
    (p / "shared/calibration/training-measurements.json" for p in (Path(__file__).resolve().parents[2].parent,
                                                                    Path(__file__).resolve().parents[3].parent)
     if (p / "shared/calibration/training-measurements.json").exists()),
    None,
)


@pytest.mark.skipif(_SHARED_TRAINING is None, reason="no shared/calibration checkout (CI)")
def test_vendored_records_are_the_shared_ones_less_the_reserved_rows():
    """The vendored copy is the shared file with only the reserved Zero Bubble 14.6B/28.3B rows left out."""
    shared = {r["id"]: r for r in json.loads(_SHARED_TRAINING.read_text())}
    vendored = {r["id"]: r for r in load_records()}
    missing = set(shared) - set(vendored)
    assert missing and all(i.startswith("zb_t5_") and ("14.6B" in i or "28.3B" in i) for i in missing), missing
    assert all(vendored[i] == shared[i] for i in set(shared) & set(vendored))


def test_every_record_prefix_has_a_source_entry():
    known = set(sources())
    prefixes = {r["id"].split("_", 1)[0] for r in load_records() if r.get("kind") not in ("hardware", "price")}
    assert prefixes - known <= {"zero", "qlora"}, prefixes - known


def test_one_throughput_figure_per_record(result):
    from collections import Counter

    counts = Counter(r.case.record_id for r in result["rows"] if r.case.category == "throughput")
    assert counts and max(counts.values()) == 1


def test_time_errors_are_signed_as_throughput(result):
    """+ means predicted faster: for a time metric that is a predicted time below the measured one."""
    for r in result["rows"]:
        if r.case.metric == "iteration_s":
            assert math.isclose(r.error, r.case.measured / r.predicted - 1.0)


def test_skips_are_counted_with_reasons(result):
    reasons = {s.reason for s in result["skips"]}
    assert any("hardware datasheet" in r for r in reasons)
    assert any("GPU count not stated" in r for r in reasons)
    assert result["summary"]["skipped_records"] > 0


def test_cli_json_and_table(capsys):
    assert main(["validate", "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"summary", "rows", "skipped"} <= set(out)
    assert main(["validate"]) == 0
    assert "throughput" in capsys.readouterr().out



def test_runs_estimated_over_gpu_memory_are_listed(tmp_path, capsys):
    """A throughput row is a run that ran, so it fit in its GPU's memory: the check lists the rows whose
    estimated per-GPU peak is above it. Korthikanti's 22B run fits; the same run with 4x the micro-batch
    (4x the activations) cannot."""
    base = next(r for r in load_records() if r["id"] == "korthikanti22_t5_22B_present")
    big = json.loads(json.dumps(base))
    big["id"] += "_mb16"
    big["parallel"].update(micro_batch=16, global_batch=16)
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([base, big]))
    res = run_validation(path)
    peaks = {r.case.record_id: r.case.peak_memory_gib(None) for r in res["rows"] if r.case.category == "throughput"}
    hbm = res["rows"][0].case.hbm_gib
    assert peaks[base["id"]] < hbm < peaks[big["id"]]
    assert [(o["id"], o["peak_gib"]) for o in res["over_memory"]] == [(big["id"], peaks[big["id"]])]
    assert (res["summary"]["runs"], res["summary"]["over_memory"]) == (2, 1)
    assert main(["validate", str(path), "--details"]) == 0
    out = capsys.readouterr().out
    assert "1/2" in out and f"over GPU memory {big['id']}" in out


def test_cli_cross_validation(capsys):
    if not fit_cv_data().get("cv"):
        pytest.skip("no cross-validation stored")
    assert main(["validate", "--cv"]) == 0
    out = capsys.readouterr().out
    assert "held-out MAE" in out and "what the data determine" in out
    assert "FP8 MAE" in out and "MoE MAE" in out
    assert "between-source spread tau" in out


def test_row_classes_split_dense_fp8_and_moe():
    """Issue 9's target is judged on dense BF16 rows; FP8 and MoE rows are reported (and judged) apart."""
    from shardwise.calibration.scoring import row_class

    assert row_class({"precision": "bf16", "moe": False}) == "dense"
    assert row_class({"precision": "fp16", "moe": False}) == "dense"
    assert row_class({"precision": "fp8", "moe": False}) == "fp8"
    assert row_class({"precision": "fp4", "moe": False}) == "fp8"
    assert row_class({"precision": "bf16", "moe": True}) == "moe"
    assert row_class({"precision": "fp8", "moe": True}) == "moe"


def test_source_spread_matches_a_hand_computed_derSimonian_laird_estimate():
    """Log errors A (0.1, 0.3), B (-0.3, -0.1), C (0, 0.2, 0.4): pooled within-source variance 0.12 / 4 =
    0.03; weights n / 0.03 = 200/3, 200/3, 100; weighted mean 3/35; Q = 160/21 on 2 degrees of freedom;
    tau^2 = (Q - 2) / (sum w - sum w^2 / sum w) = 59/1600; kappa = 0.03 / tau^2 = 48/59."""
    from shardwise.calibration.validate import source_spread

    as_errors = {k: [math.expm1(x) for x in v] for k, v in
                 {"A": [0.1, 0.3], "B": [-0.3, -0.1], "C": [0.0, 0.2, 0.4]}.items()}
    spread = source_spread(as_errors)
    assert spread["sigma"] == pytest.approx(math.sqrt(0.03))
    assert spread["tau"] == pytest.approx(math.sqrt(59 / 1600))
    assert spread["kappa"] == pytest.approx(48 / 59)


def test_source_spread_is_zero_between_identical_sources_and_needs_two():
    from shardwise.calibration.validate import source_spread
    from shardwise.errors import ShardwiseError

    same = source_spread({"A": [0.1, -0.1], "B": [0.1, -0.1]})
    assert same["tau"] == 0.0 and same["kappa"] == math.inf
    with pytest.raises(ShardwiseError):
        source_spread({"A": [0.1, 0.2]})


def test_cross_validation_spread_is_json_safe_and_optional():
    """The --cv report's spread: kappa None where the sources do not differ, no spread at all where the
    held-out rows cannot show one (the rest of the report still prints)."""
    from shardwise.calibration.validate import _dense_spread

    def rows(*errors):
        return {"held_out": [{"error": e, "tags": {"precision": "bf16", "moe": False}} for e in errors]}

    same = _dense_spread({"A": rows(0.1, -0.1), "B": rows(0.1, -0.1)})
    assert same["tau"] == 0.0 and same["kappa"] is None
    json.dumps(same)
    assert _dense_spread({"A": rows(0.1, 0.2)}) is None


def test_cross_validation_classes_partition_the_held_out_rows():
    if not fit_cv_data().get("cv"):
        pytest.skip("no cross-validation stored")
    from shardwise.calibration.validate import cross_validation

    result = cross_validation()
    for g in result["groups"].values():
        assert sum(c["rows"] for c in g["classes"].values()) == len(g["held_out"])
        assert g["rows"] == g["classes"]["dense"]["rows"]


def test_bad_calibration_path(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{oops")
    assert main(["validate", str(bad)]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_fit_recovers_known_constants():
    """Measurements generated by known constants: the fitter must find them again from the priors."""
    cases, _ = collect_cases()
    scoped = [c for c in cases if in_fit_scope(c) and c.category == "throughput"]
    picked = [c for c in scoped if c.tags["gpu_family"] == "A100-80GB"][:15] + [c for c in scoped if c.tags["gpu_family"] == "H100-SXM"][:15]
    params = tuple(p for p in PARAMS if p.name in ("A100 GEMM efficiency", "H100 GEMM efficiency", "per-step overhead (s)"))
    truth = {"A100 GEMM efficiency": 0.62, "H100 GEMM efficiency": 0.55, "per-step overhead (s)": 0.05}
    consts = apply(base_constants(), truth)
    for c in picked:
        c.measured = c.predict(consts)
    problem = Problem(picked, base_constants(), params, prior_weight=0.0)
    fitted = problem.fit(max_nfev=20).values
    for name, value in truth.items():
        assert fitted[name] == pytest.approx(value, rel=0.05), name


def test_a_source_of_n_rows_weighs_n_over_n_plus_kappa():
    """Random-effects weights (fit.py docstring): the squared weights of a source's rows sum to
    n / (n + kappa), so one row counts 1 / (1 + kappa) of a source and a large source tends to 1."""
    from shardwise.calibration.fit import SOURCE_NOISE_RATIO

    cases, _ = collect_cases()
    picked = [c for c in cases if c.group in ("tinyllama", "maxtext", "internevo") and c.category == "throughput"]
    problem = Problem(picked, base_constants())
    for group in ("tinyllama", "maxtext", "internevo"):
        rows = [i for i, c in enumerate(picked) if c.group == group]
        n = len(rows)
        assert float(np.sum(problem.weights[rows] ** 2)) == pytest.approx(n / (n + SOURCE_NOISE_RATIO))
    one = [i for i, c in enumerate(picked) if c.group == "tinyllama"]
    assert len(one) == 1 and problem.weights[one[0]] ** 2 == pytest.approx(1 / (1 + SOURCE_NOISE_RATIO))



def test_runs_of_unknown_speed_inform_the_fit_by_their_ratios_only():
    """torchao's B200s are "power limited" at a limit the record does not state: their runs share one
    free scale, profiled out of the fit. Scaling all their predictions by one factor leaves their
    residuals unchanged (only the ratios between the runs count); scaling one of them does not, and
    a parameter that touches one run of the group moves them all."""
    cases, _ = collect_cases()
    picked = [c for c in cases if c.record_id.startswith("torchao_b200_llama3_8b_") and c.category == "throughput"]
    assert len(picked) == 5 and all(c.tags["unknown_speed"] == "torchao: B200 (power limited)" for c in picked)
    assert not any(c.tags["unknown_speed"] for c in cases if c.record_id.startswith("torchao_h100"))
    params = tuple(p for p in PARAMS if p.name == "MX block-scaled / tensor-wise GEMM speed")
    problem = Problem(picked, base_constants(), params)
    x = np.array([p.start for p in params])
    base = problem.log_errors(x)
    assert float(np.sum(base)) == pytest.approx(0.0, abs=1e-12)
    for c in picked:
        c.measured *= 2.0
    assert problem.log_errors(x) == pytest.approx(base, abs=1e-12)
    picked[0].measured *= 2.0
    assert problem.log_errors(x) != pytest.approx(base, abs=1e-6)
    assert problem.affects[0].all()  # the MX ratio touches the MXFP8 runs only, yet every run's residual moves



def test_a_stated_power_limit_slows_the_estimate():
    """A record that states its GPUs' power limit is estimated at it (the catalog's power rule); without
    it the run is one of unknown speed (above)."""
    from shardwise.calibration import record_cases

    base = next(r for r in load_records() if r["id"] == "torchao_b200_llama3_8b_bf16")
    tokens = {}
    for limit in (700.0, 1000.0):
        stated = json.loads(json.dumps(base))
        stated["cluster"]["power_limit_w"] = limit
        case = next(c for c in record_cases(stated) if c.category == "throughput")
        assert case.tags["unknown_speed"] is None
        tokens[limit] = case.predict(None)
    assert tokens[700.0] < tokens[1000.0]


def test_shipped_constants_match_the_recorded_fit():
    """The shipped constants are the ones the fit script wrote, and today's code gives the recorded
    objective at them (a changed prediction means: re-run scripts/fit_constants.py)."""
    fit = fitted_data().get("fit")
    if not fit:
        pytest.skip("no fit recorded")
    cases, _ = collect_cases()
    problem = Problem([c for c in cases if in_fit_scope(c)], base_constants())
    assert fit["rows"] == len(problem.cases)
    assert apply(base_constants(), fit["parameters"]).per_gpu == default_constants().per_gpu
    x = np.array([fit["parameters"][p.name] for p in PARAMS])
    assert problem.cost(x) == pytest.approx(fit["cost"], rel=1e-6)


def test_parallel_folds_equal_serial_folds():
    """The forked fold workers give exactly the serial leave-one-group-out result."""
    from shardwise.calibration.fit import FitResult, leave_one_group_out

    cases, _ = collect_cases()
    picked = [c for c in cases if c.group in ("maxtext", "tinyllama", "megatron_readme")]
    values = fitted_data()["fit"]["parameters"]
    full = FitResult(values, 0.0, {}, {}, len(picked))
    serial = leave_one_group_out(picked, base_constants(), full, max_nfev=1, jobs=1)
    forked = leave_one_group_out(picked, base_constants(), full, max_nfev=1, jobs=2)
    assert list(serial) == list(forked) == ["maxtext", "megatron_readme", "tinyllama"]
    for g in serial:
        assert serial[g]["values"] == forked[g]["values"]
        assert [r["predicted"] for r in serial[g]["rows"]] == [r["predicted"] for r in forked[g]["rows"]]


def test_fp8_and_moe_rows_cannot_move_the_shared_constants():
    """The shared constants are fitted on dense rows only: scaling every FP8/MoE measurement leaves them
    exactly as they were, and moves only the FP8/MoE-specific constants."""
    from shardwise.calibration.fit import fit_in_stages, pins_shared_constants, split_params

    cases, _ = collect_cases()
    scoped = [c for c in cases if in_fit_scope(c) and c.group in ("fp8lm", "maxtext", "ibm_fp8_fsdp2")]
    assert any(pins_shared_constants(c) for c in scoped) and not all(pins_shared_constants(c) for c in scoped)
    shared, specific = split_params(scoped)
    assert "H100 GEMM efficiency" in {p.name for p in shared}
    assert "H100 FP8 GEMM efficiency" in {p.name for p in specific}
    first = fit_in_stages(scoped, base_constants(), max_nfev=2, assess=False)
    for c in scoped:
        if not pins_shared_constants(c):
            c.measured *= 0.7
    second = fit_in_stages(scoped, base_constants(), max_nfev=2, assess=False)
    assert all(first.values[p.name] == second.values[p.name] for p in shared)
    assert first.values["H100 FP8 GEMM efficiency"] != second.values["H100 FP8 GEMM efficiency"]


def test_error_band_comes_from_held_out_runs_of_the_same_class():
    """A dense job's band is read from dense held-out runs and an MoE job's from MoE runs, so the large MoE
    and FP8 misfits do not widen a dense estimate's band (and the reverse)."""
    from shardwise.specs.job import job_from_mapping
    from shardwise.train.estimate import estimate

    if not fit_cv_data().get("error_bands"):
        pytest.skip("no cross-validation stored")

    def band(model, **parallel):
        job = job_from_mapping({"model": model, "cluster": {"gpu": "H100", "gpus": 64},
                                "training": {"seq_len": 4096, "global_batch": 256}, "parallel": parallel})
        return estimate(job).error_band

    dense, moe = band("llama-3.1-8b"), band("mixtral-8x7b", ep=8)
    assert dense["basis"].startswith("dense/") and moe["basis"].startswith("moe/")
    bands = fit_cv_data()["error_bands"]["bands"]
    assert dense["pct"] == bands[dense["basis"]]["pct"] and moe["pct"] == bands[moe["basis"]]["pct"]


def test_records_complete_their_models_from_the_right_family():
    """A GPT preset of the same depth and width completes a GPT record (Narayanan's 39B: 48 x 8192, 4h
    GeLU MLP), never a Llama-family one of that shape (CodeLlama-34B: SwiGLU, ffn 22016, RMSNorm)."""
    from shardwise.calibration.records import _model

    llama = _model({"name": "Llama-2-34B (CodeLlama-34B-like)", "layers": 48, "hidden": 8192, "heads": 64, "kv_heads": 8,
                    "ffn": 22016, "vocab": 32000}, {}, [])
    assert (llama.mlp, llama.norm, llama.linear_bias) == ("swiglu", "rmsnorm", False)
    assert llama.layer_params_dense == 8192 * 8192 * 2 + 2 * 8192 * 1024 + 3 * 8192 * 22016 + 2 * 8192
    gpt = _model({"name": "GPT 39B", "layers": 48, "hidden": 8192, "heads": 64, "vocab": 51200}, {}, [])
    assert (gpt.mlp, gpt.ffn) == ("gelu", 4 * 8192)


def test_a_step_time_is_scored_only_where_the_global_batch_is_stated(tmp_path):
    """A step counts its micro-batches, so a record whose global batch is not stated is scored by the rate it
    also gives (TFLOP/s here), which the batch does not set; with the batch stated, by its step time."""
    base = next(r for r in load_records() if r["id"] == "together_b200_nemotron4_15b_bf16_256gpu")
    silent = json.loads(json.dumps(base))
    silent["id"] += "_nogbs"
    silent["parallel"]["global_batch"] = None
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([base, silent]))
    metric = {r.case.record_id: r.case.metric for r in run_validation(path)["rows"] if r.case.category == "throughput"}
    assert metric == {base["id"]: "iteration_s", silent["id"]: "tflops_per_gpu"}


def test_a_source_stated_virtual_pipeline_applies_to_its_pipelined_runs_only():
    """Parallel Folding's setup (calibration_sources.yaml: vpp 7, Megatron-Core's reference Mixtral 8x22B
    mapping) interleaves its PP-8 runs, 56 layers in 8 x 7 one-layer chunks; its PP-1 runs keep one stage."""
    from shardwise.calibration.records import build_job

    records = {r["id"]: r for r in load_records()}
    source = sources()["pf"]
    piped = build_job(records["pf_t4_mixtral8x22b_mcore_128"], source, notes := [])
    assert (piped.plan.pp, piped.plan.vpp, piped.plan.schedule) == (8, 7, "interleaved")
    assert "vpp=7 (the source's setup; not stated for this record)" in notes
    flat = build_job(records["pf_t4_mixtral8x22b_fsdp-ep_128"], source, [])
    assert (flat.plan.pp, flat.plan.vpp) == (1, 1)


def test_a_source_stated_gpu_replaces_the_records_and_slows_its_tensor_parallel_runs():
    """FlagPerf's Llama3-8B README labels rows "A100" but its environment section names the machine (DGX
    A800, NVIDIA_A800-SXM4-80GB): the job runs on the A800, whose 400 GB/s NVLink makes the TP-8 run's
    tensor-parallel transfers 600/400 = 1.5x as long as on the A100 (the per-collective latency is the same,
    so the exposed TP time grows by less) and leaves the GEMMs as they were."""
    from shardwise.calibration.records import build_job
    from shardwise.calibration.sources import Source
    from shardwise.train.estimate import estimate

    record = {r["id"]: r for r in load_records()}["flagperf_llama3_8b_a100_1x8_pp1dp1tp8"]
    stated = sources()["flagperf"]
    on_a800 = build_job(record, stated, notes := [])
    assert on_a800.cluster.gpu.name == "A800-80GB"
    assert any(n.startswith("gpu=A800-80GB (the source's stated hardware") for n in notes)
    as_labelled = build_job(record, Source(stated.prefix, stated.label, stated.group, stated.facts), [])
    assert as_labelled.cluster.gpu.name == "A100-80GB"
    a800, a100 = estimate(on_a800).time_s, estimate(as_labelled).time_s
    assert a800.compute == pytest.approx(a100.compute, rel=1e-9)
    assert 1.3 < a800.tp_comm / a100.tp_comm <= 1.5


def test_a_source_stated_recompute_overrides_the_records_text():
    """fms-fsdp's README table of the compiled runs (the blog's figures) states 7b without activation
    checkpointing, and its HFU/MFU of 0.74 / 0.55 for 70b on A100 is the 4/3 of recomputing every block: the
    jobs run so, saying why; with the record's "selective" the 70b run would not fit in the A100's 80 GB,
    with full recompute it does."""
    from shardwise.calibration.records import build_job
    from shardwise.calibration.sources import Source
    from shardwise.train.estimate import estimate

    records = {r["id"]: r for r in load_records()}
    stated = sources()["ibmcompile24"]
    seven = build_job(records["ibmcompile24_7B_a100_compile"], stated, notes := [])
    assert seven.plan.recompute == "none"
    assert "recompute=none (the source's statement; the record says 'selective (block-level)')" in notes
    seventy = records["ibmcompile24_70B_a100_compile"]
    as_stated = build_job(seventy, stated, [])
    as_recorded = build_job(seventy, Source(stated.prefix, stated.label, stated.group, stated.facts), notes := [])
    assert (as_stated.plan.recompute, as_recorded.plan.recompute) == ("full", "full")
    assert any(n.startswith("recompute=full (the run ran: selective needs") for n in notes)
    selective = replace(as_recorded, plan=as_recorded.plan.model_copy(update={"recompute": "selective"}))
    assert estimate(as_stated).memory.total / 2**30 < 80 < estimate(selective).memory.total / 2**30


def test_an_unstated_recompute_is_the_least_under_which_the_run_fits():
    """A measured run fit in memory: a record whose scheme is assumed and does not fit reads the next scheme
    that does; a stated scheme is kept even where the estimate puts it over the GPU's memory (the estimate,
    not the record, is then what the over-memory list questions)."""
    from shardwise.calibration.records import _least_recompute_that_fits, build_job
    from shardwise.train.estimate import estimate

    records = {r["id"]: r for r in load_records()}
    tuned = records["ibmfp8fsdp2_t3_70B_bf16_512gpu"]  # "tuned (not stated)"
    job = build_job(tuned, sources()["ibmfp8fsdp2"], notes := [])
    assert job.plan.recompute == "full" and estimate(job).peak_memory_gib <= job.cluster.gpu.memory_gib
    assert any("the run ran: selective needs" in n for n in notes)
    small = build_job(records["ibmcompile24_7B_a100_compile"], sources()["ibmcompile24"], [])
    assert _least_recompute_that_fits(small, kept := []) is small and kept == []  # fits as read: unchanged
    stated = replace(job, plan=job.plan.model_copy(update={"recompute": "none"}))
    assert build_job(records["fa2paper_t1_1.3b_8k_noflash"], sources()["fa2paper"], []).plan.recompute == "none"
    assert _least_recompute_that_fits(stated, []).plan.recompute in ("selective", "full")


@pytest.mark.parametrize(("text", "scheme", "stated"), [
    ("remat policy save_qkv_proj", "selective", True), ("SAVE_DOT_ONLY checkpoint policy", "selective", True),
    ("none (checkpoint=False)", "none", True), ("full (gradient checkpointing)", "full", True),
    ("selective (block-level)", "selective", False), ("tuned (not stated)", "none", False), ("", "none", False),
])
def test_a_records_recompute_text_reads_as_a_scheme_and_whether_it_is_stated(text, scheme, stated):
    """Named JAX checkpoint policies are the stack's selective, as stated; block-level or tuned schemes and
    no text are open to the fit rule (the source's default where the record says nothing)."""
    from shardwise.calibration.records import _recompute

    assert _recompute({"recompute": text}, {}, []) == (scheme, stated)


def test_megatron_2021_runs_have_neither_sequence_parallelism_nor_the_distributed_optimizer():
    """Narayanan et al. 2021 ran the Megatron-LM of 2021: tensor parallelism by all-reduce, with the norms
    and dropouts on the whole sequence in every TP rank (sequence parallelism came with Korthikanti et al.
    2022), and optimizer states replicated over data parallelism (the distributed optimizer came in 2022).
    For the 1T run (tp 8, pp 64, dp 6) the layers' compute grows without sequence parallelism, and each GPU
    holds all 12 bytes of Adam states per parameter of its shard instead of 1/6 of them."""
    from shardwise.calibration.records import build_job
    from shardwise.calibration.sources import Source
    from shardwise.train.estimate import estimate

    record = {r["id"]: r for r in load_records()}["narayanan21_t1_1T"]
    stated = sources()["narayanan21"]
    job = build_job(record, stated, [])
    assert (job.plan.sequence_parallel, job.plan.zero, job.plan.dp) == (False, 0, 6)
    later = {k: v for k, v in stated.facts.items() if k not in ("sequence_parallel", "zero")}
    modern = build_job(record, Source(stated.prefix, stated.label, stated.group, later), [])
    assert (modern.plan.sequence_parallel, modern.plan.zero) == (True, 1)
    then, now = estimate(job), estimate(modern)
    assert then.time_s.compute > now.time_s.compute
    assert then.memory.optimizer / now.memory.optimizer == pytest.approx(6.0, rel=1e-6)
