"""Calibration records -> validation cases.

Turns each applicable record of ``shared/calibration/training-measurements.json`` into cases: a
measured figure, the same figure predicted from a job built from the record, and the assumptions made
where the record is silent. A record that cannot be estimated yields a skip reason instead. Metric
conventions follow each source's notes (e.g. Narayanan et al. 2021 count recompute FLOPs in "achieved
TFLOP/s", Eq. 3; Llama 3 reports BF16 MFU with PaLM's non-causal count).

The fit split (the records ``scripts/fit_constants.py`` fits on) is named in FIT_SOURCES; every other
record is held out.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from shardwise.cost.constants import Constants
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import get_gpu, make_cluster
from shardwise.specs.job import TrainJob, check_plan
from shardwise.specs.model import ModelSpec, load_model, preset_names
from shardwise.specs.training import TrainingSpec, TrainPlan

# Sources whose records are used to fit the constants (scripts/fit_constants.py); the rest validate.
FIT_SOURCES = ("Korthikanti 2022 Table 4", "Narayanan 2021 Table 1", "Narayanan 2021 Table 2 (ZeRO-3)")
# H100 rows: the two 8K-sequence rows of Llama 3 Table 4 (the only H100 measurements); the 128K row is held out.
FIT_RECORD_IDS = ("llama3_t4_8192gpu_8192", "llama3_t4_16384gpu_8192")

# What each source states (or, marked "assumed", what its era's software did) where records are silent.
SOURCE_FACTS: dict[str, dict[str, Any]] = {
    "Korthikanti 2022": {"flash_attention": False, "recompute": "full"},  # Megatron-LM 2022: fused softmax
    "Narayanan 2021": {"flash_attention": False, "recompute": "full"},  # Eq. 3 counts the recompute pass
    "Megatron README": {"flash_attention": False, "recompute": "full"},
    "BigScience BLOOM": {"flash_attention": False, "recompute": "full"},
    # Llama 3 Sec. 3.3.2: no activation checkpointing at 8K; TP with sequence parallelism (assumed, Megatron-style).
    "Llama 3": {"flash_attention": True, "recompute": "none", "sequence_parallel": True},
    # Assumed: the paper's 2023 Megatron-LM fork with its default fused softmax (no FlashAttention).
    "Zero Bubble": {"flash_attention": False, "recompute": "none"},
}


def source_facts(label: str) -> dict[str, Any]:
    for key, facts in SOURCE_FACTS.items():
        if label.startswith(key):
            return facts
    return {"flash_attention": True, "recompute": "none"}


# Records' schedule strings -> engine names.
SCHEDULES = [
    (r"zb-?2p|zb-h2", "zb-h2"),
    (r"zb-?1p|zb-h1", "zb-h1"),
    (r"zb-?v", "zbv"),
    (r"1f1b-i|(?<!non-)interleav", "interleaved"),
    (r"1f1b", "1f1b"),
    (r"gpipe", "gpipe"),
]


@dataclass
class Case:
    record_id: str
    source: str
    metric: str  # what is compared, e.g. "iteration_s", "mfu"
    category: str  # time | throughput | mfu | memory | bubble
    measured: float
    predict: Callable[[Constants | None], float]
    assumptions: list[str] = field(default_factory=list)

    @property
    def fit(self) -> bool:
        return self.source in FIT_SOURCES or self.record_id in FIT_RECORD_IDS


@dataclass
class Skip:
    record_id: str
    source: str
    reason: str


# Record-id prefix -> per-table source label (first match wins).
SOURCE_LABELS = (
    (("korthikanti22_t5", "korthikanti22_530B", "korthikanti22_appC"), "Korthikanti 2022 Table 5 / Sec. 6"),
    (("korthikanti22_t4",), "Korthikanti 2022 Table 4"),
    (("korthikanti22_fig",), "Korthikanti 2022 Fig. 1/7 (activations)"),
    (("narayanan21_t1",), "Narayanan 2021 Table 1"),
    (("narayanan21_t2_ZeRO",), "Narayanan 2021 Table 2 (ZeRO-3)"),
    (("narayanan21_t2",), "Narayanan 2021 Table 2 (PTD-P)"),
    (("llama3",), "Llama 3 Table 4"),
    (("zb_",), "Zero Bubble Tables 4-7"),
    (("zero_fig1",), "ZeRO Fig. 1 (model states)"),
    (("megatron_readme",), "Megatron README GPT-3 example"),
    (("bloom",), "BigScience BLOOM-176B"),
)


def source_label(record: dict[str, Any]) -> str:
    """Short per-table label of a record's source."""
    for prefixes, label in SOURCE_LABELS:
        if record["id"].startswith(prefixes):
            return label
    return record["source"].split(",")[0].split("(")[0].strip()[:40]


def resolve_gpu(text: str | None) -> str:
    """Free-text GPU description ('H100-SXM-80GB HBM3 (700W ...)') -> catalog name."""
    if not text:
        raise ShardwiseError("no GPU given")
    cleaned = re.sub(r"\(.*?\)", " ", text).strip()
    tokens = re.split(r"[\s,]+", cleaned)
    for n in range(len(tokens), 0, -1):
        candidate = "-".join(tokens[:n])
        for variant in (candidate, re.sub(r"-?(SXM\d?|HBM\d\w*)", "", candidate, flags=re.I)):
            try:
                gpu = get_gpu(variant)
            except ShardwiseError:
                continue
            if "80GB" in text.upper() and "40" in gpu.name:
                continue
            return gpu.name
    raise ShardwiseError(f"unknown GPU {text!r}")


def _first_word(value: Any) -> str | None:
    return str(value).split()[0].strip(",;").lower() if value else None


def _model_from_record(m: dict[str, Any], assumptions: list[str]) -> ModelSpec:
    """Model of a record: its numbers, completed from the preset with the same layers and hidden."""
    if not (m.get("layers") and m.get("hidden")):
        raise ShardwiseError("missing model layers/hidden")
    preset = None
    for name in preset_names():
        spec = load_model(name)
        if spec.layers == m["layers"] and spec.hidden == m["hidden"] and name.startswith("gpt-"):
            preset = spec
    heads = m.get("heads") or (preset.heads if preset else None)
    if heads is None:
        raise ShardwiseError("missing attention heads")
    if not m.get("heads"):
        assumptions.append(f"heads={heads} from preset {preset.name}")
    gpt = preset is not None or (m.get("kv_heads") in (None, heads) and m.get("ffn") == 4 * m["hidden"])
    vocab = m.get("vocab")
    if vocab is None:
        if not gpt:
            raise ShardwiseError("missing vocabulary size")
        vocab = preset.vocab if preset else 51200
        assumptions.append(f"vocab={vocab} (Megatron-LM GPT-2 BPE, padded)")
    spec = {
        "name": m.get("name") or "record",
        "layers": m["layers"],
        "hidden": m["hidden"],
        "heads": heads,
        "kv_heads": m.get("kv_heads") or heads,
        "ffn": m.get("ffn") or 4 * m["hidden"],
        "vocab": vocab,
    }
    if gpt:
        spec.update(mlp="gelu", norm="layernorm", tied_embeddings=True, linear_bias=True, position_embeddings=m.get("seq_len") or 0, dropout=True)
    return ModelSpec(**spec)


def _schedule(text: Any, pp: int, vpp: int) -> str:
    if text:
        low = str(text).lower()
        for pattern, name in SCHEDULES:
            if re.search(pattern, low):
                return name
    return "interleaved" if vpp > 1 else "1f1b"


def _vpp(raw: Any, layers: int, pp: int, schedule_text: Any, assumptions: list[str]) -> int:
    """Virtual stages; 'one layer per chunk' and unstated interleaving follow the layout the sources
    describe: first and last stage one layer fewer, i.e. layers + 2 = pp * vpp * k (Zero Bubble README;
    Llama 3 Sec. 3.3.2), with one layer per chunk (k = 1)."""
    if isinstance(raw, int):
        return raw
    interleaved = raw is not None or _schedule(schedule_text, pp, 1) == "interleaved"
    if not interleaved or pp == 1:
        return 1
    if (layers + 2) % pp == 0:
        v = (layers + 2) // pp
        assumptions.append(f"vpp={v}: one layer per chunk, first/last stage one layer fewer")
        return v
    assumptions.append("vpp=2 (not stated)")
    return 2


def _job(record: dict[str, Any], assumptions: list[str]) -> TrainJob:
    m, c, par = record["model"], record["cluster"], dict(record["parallel"] or {})
    precision = str(record.get("precision") or "bf16").lower()
    if "fp8" in precision:
        raise ShardwiseError("FP8 training is not calibrated")
    model = _model_from_record(m, assumptions)
    if not m.get("seq_len"):
        raise ShardwiseError("missing sequence length")
    n_gpus = c.get("n_gpus")
    gpu = resolve_gpu(c.get("gpu"))
    measured = record.get("measured") or {}
    tp, pp = par.get("tp"), par.get("pp")
    if tp is None and pp is None and measured.get("model_parallel_size"):
        mp = int(measured["model_parallel_size"])
        tp, pp = min(8, mp), max(1, mp // 8)
        assumptions.append(f"tp={tp}, pp={pp} from model-parallel size {mp} (TP=8 convention)")
    if tp is None or pp is None or not n_gpus:
        raise ShardwiseError("missing parallel degrees")
    facts = source_facts(source_label(record))
    recompute = _first_word(par.get("recompute"))
    if recompute is None:
        recompute = facts["recompute"]
        assumptions.append(f"recompute={recompute}")
    if recompute not in ("none", "selective", "full"):
        raise ShardwiseError(f"unsupported recompute {par.get('recompute')!r}")
    mb = par.get("micro_batch")
    if mb is None:
        mb = 1
        assumptions.append("micro_batch=1")
    gb = par.get("global_batch") or (record.get("derived") or {}).get("global_batch_seqs")
    if gb is None:
        raise ShardwiseError("missing global batch")
    vpp = _vpp(par.get("vpp"), model.layers, pp, par.get("schedule"), assumptions)
    schedule = _schedule(par.get("schedule"), pp, vpp)
    zero = par.get("zero_stage")
    if isinstance(zero, str):
        raise ShardwiseError(f"unsupported ZeRO variant {zero!r}")
    if zero is None:
        # FSDP whose parameters stay unsharded through the step and whose gradients are accumulated
        # in FP32 and reduce-scattered once per step (Llama 3 Sec. 3.3.2) times like ZeRO-1.
        fsdp = str(par.get("fsdp") or "").lower()
        zero = 1 if "not resharded" in fsdp else 3 if fsdp else 0
        if fsdp:
            assumptions.append(f"zero={zero} for FSDP {par['fsdp']!r}")
    cp = par.get("cp") or 1
    sp = par.get("sequence_parallel")
    if sp is None and "sequence_parallel" in facts:
        sp = facts["sequence_parallel"]
        assumptions.append(f"sequence_parallel={sp}")
    sp = bool(sp)
    flash = facts["flash_attention"]
    plan = TrainPlan(tp=tp, pp=pp, vpp=vpp, cp=cp, zero=zero, sequence_parallel=sp, recompute=recompute,
                     micro_batch=mb, schedule=schedule, flash_attention=flash,
                     overlap_grad_reduce="do not use any overlapping" not in record.get("notes", ""))
    cluster = make_cluster(gpu, n_gpus, c.get("gpus_per_node"))
    training = TrainingSpec(seq_len=m["seq_len"], global_batch=gb, precision="fp16" if "fp16" in precision else "bf16")
    plan = check_plan(model, cluster, training, plan)
    return TrainJob(model=model, cluster=cluster, training=training, plan=plan, name=record["id"])


def _throughput_cases(record: dict[str, Any], label: str) -> list[Case] | Skip:
    from shardwise.cost.flops import megatron_gpt_flops
    from shardwise.train.estimate import estimate

    assumptions: list[str] = []
    try:
        job = _job(record, assumptions)
    except ShardwiseError as exc:
        return Skip(record["id"], label, str(exc))
    def est(constants: Constants | None) -> Any:
        return estimate(job, constants)

    tr, plan, model, n = job.training, job.plan, job.model, job.cluster.num_gpus

    def eq3_tflops(constants: Constants | None, full: bool) -> float:
        flops = megatron_gpt_flops(tr.global_batch, tr.seq_len, model.layers, model.hidden, model.vocab, "full" if full else "none")
        return flops / est(constants).step_time_s / n / 1e12

    eq3 = label.startswith(("Narayanan", "Megatron README", "BigScience"))

    def paper_hfu(constants: Constants | None) -> float:
        """HFU in the Megatron papers' convention (Korthikanti et al. 2022 Sec. 5 closed forms)."""
        flops = megatron_gpt_flops(tr.global_batch, tr.seq_len, model.layers, model.hidden, model.vocab, plan.recompute)
        return flops / (est(constants).step_time_s * n * job.cluster.gpu.peak_flops(tr.precision))

    getters: dict[str, tuple[str, Callable[[Constants | None], float]]] = {
        "iteration_s": ("time", lambda c: est(c).step_time_s),
        "mfu": ("mfu", lambda c: est(c).mfu),
        "hfu": ("mfu", paper_hfu if label.startswith("Korthikanti") else lambda c: est(c).hfu),
        "samples_per_sec_per_gpu": ("throughput", lambda c: est(c).samples_per_s_per_gpu),
        "samples_per_sec": ("throughput", lambda c: est(c).samples_per_s_per_gpu * n),
        "memory_gb": ("memory", lambda c: est(c).peak_memory_gib),
    }
    if eq3:
        getters["tflops_per_gpu"] = ("throughput", lambda c: eq3_tflops(c, plan.recompute == "full"))
        getters["tflops_per_gpu_hardware_range"] = ("throughput", lambda c: eq3_tflops(c, True))
    else:
        getters["tflops_per_gpu"] = ("throughput", lambda c: est(c).model_tflops_per_gpu)
    cases = []
    for metric, value in (record.get("measured") or {}).items():
        if metric not in getters or value is None:
            continue
        if isinstance(value, list):
            value = sum(value) / len(value)
        category, getter = getters[metric]
        cases.append(Case(record["id"], label, metric, category, float(value), getter, assumptions))
    if not cases:
        return Skip(record["id"], label, "no measured figure Shardwise predicts")
    try:
        est(None)
    except ShardwiseError as exc:
        return Skip(record["id"], label, str(exc))
    return cases


def _layer_cases(record: dict[str, Any], label: str) -> list[Case] | Skip:
    """Korthikanti et al. 2022 Table 4: forward and backward time of one 22B layer on 8 A100s."""
    from shardwise.cost.compute import Device
    from shardwise.cost.constants import default_constants
    from shardwise.cost.layer import Groups, transformer_layer

    m, par = record["model"], record["parallel"]
    spec = ModelSpec(name="gpt-22b-layer", layers=1, hidden=m["hidden"], heads=m["heads"], ffn=m["ffn"], vocab=51200,
                     mlp="gelu", norm="layernorm", linear_bias=True, tied_embeddings=True, dropout=True)
    cluster = make_cluster(resolve_gpu(record["cluster"]["gpu"]), record["cluster"]["n_gpus"])
    tp, sp, rc = par["tp"], bool(par["sequence_parallel"]), _first_word(par["recompute"])
    tokens = par["micro_batch"] * m["seq_len"]

    def cost(c: Constants | None) -> tuple[float, float]:
        consts = c or default_constants()
        dev = Device.of(cluster.gpu, "bf16", consts.compute_for(cluster.gpu.name))
        tier = cluster.tier_for(tp, 1)
        pc = transformer_layer(spec, False, tokens, m["seq_len"], sp and tp > 1, rc, False, dev, Groups(tp, 1, 1, tier, tier, tier))
        ov = consts.overlap.tp_backward_overlap
        return pc.f_s + pc.tp_fwd_s, pc.i_s + pc.w_s + pc.recompute_s + pc.tp_bwd_s * (1 - ov)

    meas = record["measured"]
    return [
        Case(record["id"], label, "forward_ms", "time", meas["forward_ms"], lambda c: 1e3 * cost(c)[0]),
        Case(record["id"], label, "backward_ms", "time", meas["backward_ms"], lambda c: 1e3 * cost(c)[1]),
    ]


def _activation_cases(record: dict[str, Any], label: str) -> list[Case] | Skip:
    """Korthikanti et al. 2022 Fig. 1/7 (analytical): first-stage activations, TP only and TP+SP+selective."""
    from shardwise.cost.activations import layer_activation_bytes
    from shardwise.train.pipeline_timing import pipeline_timing
    from shardwise.train.stages import stage_contents

    m, par = record["model"], record["parallel"]
    assumptions: list[str] = []
    spec = _model_from_record(m, assumptions)
    pp, tp, mb = par["pp"], par["tp"], par["micro_batch"]
    vpp = 3 if spec.layers in (96, 105) else 1  # Table 5 runs: 175B and 530B interleave 3 stages
    if vpp > 1:
        assumptions.append("vpp=3 as in the paper's Table 5 configuration")
    m_count = par["global_batch"] // mb
    cases = []
    for metric, sp, rc in (("activations_GiB_tp_baseline", False, "none"), ("activations_GiB_seqpar_selective", True, "selective")):
        per_layer = layer_activation_bytes(spec, False, mb * m["seq_len"], m["seq_len"], tp, sp, rc, False)
        stages = stage_contents(spec, pp * vpp)
        acts = [s.layers * per_layer for s in stages]
        zeros = [0.0] * len(acts)
        sched = "interleaved" if vpp > 1 else "1f1b"
        peak = pipeline_timing(sched, pp, vpp, m_count, zeros, zeros, zeros, 0.0, acts).peak_activation[0]
        cases.append(Case(record["id"], label, metric, "memory", record["measured"][metric], lambda c, v=peak: v / 2**30, assumptions))
    return cases


def _zero_cases(record: dict[str, Any], label: str) -> list[Case]:
    """ZeRO Fig. 1: per-GPU model states of a 7.5B model on 64 GPUs, stages 0-3, in GB (1e9)."""
    from shardwise.cost.memory import model_state_bytes

    psi, nd = record["model"]["params"], record["parallel"]["dp"]
    out = []
    for stage, (name, value) in enumerate(record["measured"]["per_gpu_model_state_gb"].items()):
        pred = model_state_bytes(psi, nd, stage, 2, 2, 12).total / 1e9
        out.append(Case(record["id"], label, f"model_states_gb[{name}]", "memory", value, lambda c, v=pred: v))
    return out


def _bubble_cases(record: dict[str, Any], label: str) -> list[Case] | Skip:
    """Zero Bubble Table 5: the paper's bubble rates (on the longest per-rank span) from the authors'
    profiled T_F, T_B, T_W, T_comm (data/zero_bubble_profiled.csv), for its handcrafted schedules."""
    import csv

    from shardwise.pipeline import generate_schedule, simulate
    from shardwise.specs._loading import data_path

    with open(data_path("zero_bubble_profiled.csv")) as fh:
        rows = {r["record"]: r for r in csv.DictReader(line for line in fh if not line.startswith("#"))}
    row = rows.get(record["id"])
    if row is None:
        return Skip(record["id"], label, "no profiled stage times for this bubble record")
    p, m = int(row["pp"]), int(row["microbatches"])
    f, b, w, c = (float(row[k]) for k in ("t_f_us", "t_b_us", "t_w_us", "t_comm_us"))
    rates = record["measured"]["bubble_rate_theoretical"]

    def rate(name: str) -> Callable[[Constants | None], float]:
        return lambda _c: simulate(generate_schedule(name, p, m), f, b, w, p2p_s=c).stage_bubble_ratio

    ours = {"1F1B": "1f1b", "ZB-H1": "zb-h1", "ZB-H2": "zb-h2"}
    return [Case(record["id"], label, f"bubble_rate[{k}]", "bubble", rates[k], rate(v)) for k, v in ours.items() if k in rates]


NOT_ESTIMATES = {
    "hardware": "hardware datasheet facts (used in the GPU catalog)",
    "price": "price facts (used in the GPU catalog)",
    "formula": "formula record (pinned in unit tests)",
}


def record_cases(record: dict[str, Any]) -> list[Case] | Skip:
    """The validation cases of one calibration record, or why it is skipped."""
    label, kind, rid = source_label(record), record.get("kind"), record.get("id", "?")
    if kind in NOT_ESTIMATES:
        return Skip(rid, label, NOT_ESTIMATES[kind])
    if kind == "layer-time":
        return _layer_cases(record, label)
    if kind == "pipeline-bubble":
        return _bubble_cases(record, label)
    if rid.startswith("korthikanti22_fig"):
        return _activation_cases(record, label)
    if kind == "train-memory-analytical" and rid.startswith("zero_fig1"):
        return _zero_cases(record, label)
    if kind == "train-memory":
        return Skip(rid, label, "unsupported feature: 4-bit quantised base weights / LoRA")
    if kind == "train-throughput":
        par = record.get("parallel") or {}
        if isinstance(par.get("zero_stage"), str) and "offload" in par["zero_stage"].lower():
            return Skip(rid, label, "unsupported feature: CPU/NVMe offload")
        if "microbatch-level" in str(par.get("recompute", "")):
            return Skip(rid, label, "unsupported feature: micro-batch-level activation recomputation")
        return _throughput_cases(record, label)
    return Skip(rid, label, f"unknown record kind {kind!r}")
