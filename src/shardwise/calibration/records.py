"""Calibration records -> validation cases.

Each applicable record of ``data/calibration/training-measurements.json`` becomes a job (its model,
cluster and plan; where the record is silent, what its source states in
``data/calibration_sources.yaml``, each such fill-in listed as an assumption) and one throughput case:
the record's primary figure (step time, tokens/s, samples/s, TFLOP/s or MFU, in that order of
preference, so a record counts once) and the same figure predicted in the source's own convention
(:func:`flops_per_token`). Memory figures give memory cases. Records that reproduce formulas (ZeRO
Fig. 1, Korthikanti Fig. 7 activations, Zero Bubble Table 5 bubble rates) give *formula* cases, kept
out of the throughput error. A record that cannot be estimated yields a skip with its reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from shardwise.calibration.sources import Source
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.flops import megatron_gpt_flops, model_flops_per_token, recompute_flops_per_token
from shardwise.errors import ShardwiseError
from shardwise.specs.hardware import get_gpu, make_cluster
from shardwise.specs.job import TrainJob, check_plan
from shardwise.specs.model import ModelSpec, preset_names
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import MoeSpec, TrainingSpec, TrainPlan

# Records' schedule strings -> engine names.
SCHEDULES = [
    (r"zb-?2p|zb-h2", "zb-h2"),
    (r"zb-?1p|zb-h1", "zb-h1"),
    (r"zb-?v", "zbv"),
    (r"1f1b-i|(?<!non-)interleav", "interleaved"),
    (r"1f1b", "1f1b"),
    (r"gpipe", "gpipe"),
]
# Primary throughput figures, in order of preference: (metric, kind of prediction).
PRIMARY = ("iteration_s", "tokens_per_sec_per_gpu", "tokens_per_sec_total", "tokens_per_sec", "samples_per_sec_per_gpu",
           "samples_per_sec", "samples_per_sec_total", "tflops_per_gpu", "tflops_per_gpu_hardware_range",
           "tflops_per_gpu_model", "mfu", "mfu_vs_bf16_peak")
MEMORY = ("memory_gb", "gpu_memory_gb")
NOT_ESTIMATES = {
    "hardware": "hardware datasheet facts (used in the GPU catalog)",
    "price": "price facts (used in the GPU catalog)",
    "formula": "formula record (pinned in unit tests)",
}
GELU_NAMES = ("gpt", "bloom", "opt", "nemotron", "pax", "126m", "5b")
SWIGLU_NAMES = ("llama", "mistral", "mixtral", "qwen", "deepseek", "gemma", "baichuan", "internlm", "aquila", "yi-")


@dataclass
class Case:
    record_id: str
    source: str  # table label
    group: str  # leave-one-source-out group
    metric: str
    category: str  # throughput | memory | time | formula
    measured: float
    predict: Callable[[Constants | None], float]
    assumptions: list[str] = field(default_factory=list)
    tags: dict[str, Any] = field(default_factory=dict)
    # Throughput rows: the run ran, so its per-GPU peak memory fit in the GPU's memory (the feasibility
    # check of :func:`shardwise.calibration.validate.over_memory`).
    peak_memory_gib: Callable[[Constants | None], float] | None = None
    hbm_gib: float | None = None


@dataclass
class Skip:
    record_id: str
    source: str
    reason: str


# --- the job a record describes ----------------------------------------------------------------


def resolve_gpu(text: str | None) -> str:
    """Free-text GPU description ('H100-SXM-80GB HBM3 (700W ...)') -> catalog name."""
    if not text:
        raise ShardwiseError("no GPU given")
    cleaned = re.sub(r"\(.*?\)", " ", text).strip()
    tokens = re.split(r"[\s,]+", cleaned)
    for n in range(len(tokens), 0, -1):
        candidate = "-".join(tokens[:n])
        for variant in (candidate, re.sub(r"-?(SXM\d?|HBM\d\w*|\d+GB)", "", candidate, flags=re.I)):
            try:
                gpu = get_gpu(variant)
            except ShardwiseError:
                continue
            if "80GB" in text.upper() and "40" in gpu.name:
                continue
            return gpu.name
    raise ShardwiseError(f"unknown GPU {text!r}")


def _first_word(value: Any) -> str | None:
    return str(value).split()[0].strip(",;()").lower() if value else None


def _model(m: dict[str, Any], facts: dict[str, Any], assumptions: list[str]) -> ModelSpec:
    """Model of a record: its numbers, completed from the Megatron GPT preset of the same shape."""
    if not (m.get("layers") and m.get("hidden")):
        raise ShardwiseError("model layers/hidden not stated")
    name = str(m.get("name") or "record")
    # A GPT preset of the same depth and width completes a GPT-style record; a record that states a
    # SwiGLU family (Llama, Mistral, ...) or an MLP size other than the preset's is not that model.
    swiglu = any(k in name.lower() for k in SWIGLU_NAMES)
    preset = None if swiglu else next((load_model(p) for p in preset_names() if p.startswith("gpt-")
                                       and load_model(p).layers == m["layers"] and load_model(p).hidden == m["hidden"]
                                       and m.get("ffn") in (None, load_model(p).ffn)), None)
    heads = facts.get("heads") or m.get("heads") or (preset.heads if preset else None)
    if heads is None:
        if m["hidden"] % 128:
            raise ShardwiseError("attention heads not stated")
        heads = m["hidden"] // 128
        assumptions.append(f"heads={heads} (head dim 128)")
    elif not m.get("heads"):
        assumptions.append(f"heads={heads}" + (f" from preset {preset.name}" if preset and not facts.get("heads") else ""))
    gelu = preset is not None or (not swiglu and any(k in name.lower() for k in GELU_NAMES))
    ffn = m.get("ffn") or m.get("expert_ffn") or (4 * m["hidden"] if gelu else None)
    if ffn is None:
        raise ShardwiseError("MLP size not stated")
    vocab = m.get("vocab") or facts.get("vocab") or (preset.vocab if preset else None)
    if vocab is None:
        raise ShardwiseError("vocabulary size not stated")
    if not m.get("vocab"):
        assumptions.append(f"vocab={vocab}")
    spec: dict[str, Any] = {
        "name": name[:60], "layers": m["layers"], "hidden": m["hidden"], "heads": heads,
        "kv_heads": m.get("kv_heads") or heads, "ffn": ffn, "vocab": vocab,
    }
    if gelu:
        spec.update(mlp="gelu", norm="layernorm", tied_embeddings=True, linear_bias=True,
                    position_embeddings=(m.get("seq_len") or 0) if preset else 0,
                    dropout=facts.get("dropout", preset is not None))
    if m.get("experts"):
        if not m.get("top_k") or not m.get("expert_ffn"):
            raise ShardwiseError("MoE top-k or expert size not stated")
        shared = m.get("shared_experts") or 0
        if shared and m.get("shared_expert_ffn") and m["shared_expert_ffn"] % m["expert_ffn"] == 0:
            # One wide shared expert (Qwen2-MoE's shared_expert_intermediate_size) = as many expert-sized ones.
            shared = shared * m["shared_expert_ffn"] // m["expert_ffn"]
        spec.update(experts=m["experts"], top_k=m["top_k"], expert_ffn=m["expert_ffn"], shared_experts=shared,
                    dense_layers=m.get("dense_layers") or 0, ffn=m.get("ffn") or m["expert_ffn"])
    return ModelSpec(**spec)


def _schedule(text: Any, vpp: int) -> str:
    if text:
        low = str(text).lower()
        for pattern, name in SCHEDULES:
            if re.search(pattern, low):
                return name
    return "interleaved" if vpp > 1 else "1f1b"


def _vpp(raw: Any, layers: int, pp: int, schedule_text: Any, assumptions: list[str]) -> int:
    """Virtual stages; unstated interleaving follows the layout the sources describe: first and last
    stage one layer fewer, i.e. layers + 2 = pp * vpp (Zero Bubble README; Llama 3 Sec. 3.3.2)."""
    if isinstance(raw, int):
        return raw
    interleaved = raw is not None or _schedule(schedule_text, 1) == "interleaved"
    if not interleaved or pp == 1:
        return 1
    if (layers + 2) % pp == 0:
        v = (layers + 2) // pp
        assumptions.append(f"vpp={v}: one layer per chunk, first/last stage one layer fewer")
        return v
    assumptions.append("vpp=2 (not stated)")
    return 2


def _zero(par: dict[str, Any], facts: dict[str, Any], assumptions: list[str]) -> int:
    zero = par.get("zero_stage")
    if isinstance(zero, int):
        return zero
    fsdp = str(par.get("fsdp") or "").lower()
    if "not resharded" in fsdp and "zero" in facts:  # Llama 3: its source states the ZeRO reading
        return int(facts["zero"])
    if fsdp and not re.match(r"(false|none|no)\b|fsdp 0\b", fsdp):  # "FSDP 0 (no)", "none (Megatron DP)": not sharded
        return 3
    if "zero" in facts:
        return int(facts["zero"])
    assumptions.append("zero=1 (distributed optimizer assumed)")
    return 1


#: Recomputation schemes from least to most memory saved (the order the fit rule climbs).
RECOMPUTE_ORDER = ("none", "selective", "full")


def _recompute(par: dict[str, Any], facts: dict[str, Any], assumptions: list[str]) -> tuple[str, bool]:
    """The record's recomputation scheme and whether the record states it (False: assumed or tuned per run,
    which :func:`_least_recompute_that_fits` may raise)."""
    text = str(par.get("recompute") or "").lower()
    if "recompute_override" in facts:  # the source states the run's scheme where the record's text is vaguer
        assumptions.append(f"recompute={facts['recompute_override']} (the source's statement; the record says {par.get('recompute')!r})")
        return facts["recompute_override"], True
    for word in RECOMPUTE_ORDER:
        if text.startswith(word):
            return word, not any(w in text for w in ("assumed", "block-level", "tuned"))
    if text.startswith(("remat", "custom", "save_", "minimal")):
        # A named checkpoint policy (MaxText, Paxml) is costed as the stack's selective (data/stacks.yaml
        # selective_recompute_gemms; docs/fidelity.md "Runs that ran" says why not per policy).
        return "selective", True
    default = facts.get("recompute", "none")
    assumptions.append(f"recompute={default}" + (f" ({par.get('recompute')!r} in the record)" if text else ""))
    return default, False


def _least_recompute_that_fits(job: TrainJob, assumptions: list[str]) -> TrainJob:
    """A measured run fit in its GPUs' memory: where the record does not state its recomputation and the
    assumed scheme's estimated peak is above the GPU's memory, the next scheme that fits (none -> selective
    -> full; full if none does), with the reason among the assumptions."""
    from shardwise.train.estimate import estimate  # the estimator sits above the calibration readers

    hbm = job.cluster.gpu.memory_gib
    scheme = job.plan.recompute
    peak = estimate(job).peak_memory_gib
    if peak <= hbm:
        return job
    for nxt in RECOMPUTE_ORDER[RECOMPUTE_ORDER.index(scheme) + 1:]:
        job = replace(job, plan=job.plan.model_copy(update={"recompute": nxt}))
        if estimate(job).peak_memory_gib <= hbm or nxt == RECOMPUTE_ORDER[-1]:
            assumptions.append(f"recompute={nxt} (the run ran: {scheme} needs {peak:.0f} GiB of the GPU's {hbm:.0f})")
            return job
    return job


def _seq_len(record: dict[str, Any], facts: dict[str, Any], assumptions: list[str]) -> int:
    seq = record["model"].get("seq_len") or facts.get("seq_len")
    if seq:
        return int(seq)
    raise ShardwiseError("sequence length not stated exactly")


# Scaling recipes named in records' precision text (first match wins) -> TrainingSpec.fp8_recipe.
RECIPES = [(r"nvfp4", "nvfp4"), (r"mxfp4", "mxfp4"), (r"mxfp8", "mxfp8"), (r"rowwise", "rowwise"),
           (r"blockwise|block scaling|1x128", "blockwise"), (r"tensorwise|current scaling", "tensorwise"),
           (r"delayed", "delayed")]


def _precision(text: str, facts: dict[str, Any]) -> tuple[str, str]:
    """(precision, fp8_recipe) of a record's precision text; the source's `fp8_recipe` fact where the
    text names no recipe, else the stack's default ("auto")."""
    low = text.lower()
    if not re.search(r"fp8|float8|fp4", low):
        return ("fp16" if "fp16" in low and "bf16" not in low else "bf16"), "auto"
    recipe = next((r for pattern, r in RECIPES if re.search(pattern, low)), facts.get("fp8_recipe", "auto"))
    return ("fp4" if recipe in ("nvfp4", "mxfp4") else "fp8"), recipe


def build_job(record: dict[str, Any], source: Source, assumptions: list[str]) -> TrainJob:
    """The job of a throughput record, or a ShardwiseError saying what the record does not determine."""
    facts = source.record_facts(record["id"])
    m, c = record["model"], record["cluster"]
    par = {**(record.get("parallel") or {})}
    derived = record.get("derived") or {}
    model = _model(m, facts, assumptions)
    seq = _seq_len(record, facts, assumptions)
    n_gpus = c.get("n_gpus") or (derived.get("n_gpus") if isinstance(derived.get("n_gpus"), int) else None) or facts.get("n_gpus")
    if not n_gpus:
        raise ShardwiseError("GPU count not stated")
    if not c.get("n_gpus"):
        assumptions.append(f"{n_gpus} GPUs")
    gpu = resolve_gpu(facts.get("gpu") or c.get("gpu"))
    if facts.get("gpu") and resolve_gpu(c.get("gpu")) != gpu:
        assumptions.append(f"gpu={gpu} (the source's stated hardware; the record says {c.get('gpu')})")
    tp = par.get("tp") or derived.get("tp")
    pp = par.get("pp") or derived.get("pp")
    measured = record.get("measured") or {}
    if tp is None and pp is None and measured.get("model_parallel_size"):
        mp = int(measured["model_parallel_size"])
        tp, pp = min(8, mp), max(1, mp // 8)
        assumptions.append(f"tp={tp}, pp={pp} from model-parallel size {mp} (TP=8 convention)")
    tp, pp = int(tp or 1), int(pp or 1)
    cp, ep = int(facts["cp"] if "cp" in facts else par.get("cp") or 1), int(par.get("ep") or 1)
    etp = int(par["etp"]) if par.get("etp") else None
    recompute, recompute_stated = _recompute(par, facts, assumptions)
    mb = par.get("micro_batch") or facts.get("micro_batch")
    if mb is None:
        mb = 1
        assumptions.append("micro_batch=1 (not stated)")
    dp = n_gpus // (tp * pp * cp)
    gb = facts.get("global_batch_override") or par.get("global_batch") or derived.get("global_batch_seqs")
    if not isinstance(gb, int) and isinstance(facts.get("global_batch"), int):
        gb = facts["global_batch"]
        assumptions.append(f"global_batch={gb} (the source's setup; not stated for this record)")
    if not isinstance(gb, int) and pp > 1:
        raise ShardwiseError("global batch not stated: a pipeline's bubble depends on the micro-batch count")
    if not isinstance(gb, int):
        gb = mb * dp
        assumptions.append(f"global_batch={gb} (one micro-batch per GPU; not stated)")
    vpp_fact = int(facts.get("vpp") or 0)
    if par.get("vpp") is None and pp > 1 and vpp_fact and model.layers % (pp * vpp_fact) == 0:
        par["vpp"] = vpp_fact
        assumptions.append(f"vpp={vpp_fact} (the source's setup; not stated for this record)")
    vpp = _vpp(par.get("vpp"), model.layers, pp, par.get("schedule"), assumptions)
    sp = par.get("sequence_parallel")
    if sp is None:
        sp = facts.get("sequence_parallel", tp > 1)
    dp_shard = facts.get("dp_shard")
    fsdp_text = str(par.get("fsdp") or "")
    hybrid = re.search(r"shard (\d+) in-node|zero1=(\d+)|FSDP=(\d+) within", fsdp_text)
    if dp_shard is None and hybrid:
        dp_shard = int(next(g for g in hybrid.groups() if g))
    if dp_shard is None and isinstance(par.get("zero1_shard_group"), int):  # InternEvo zero1=N: shard over N ranks
        dp_shard = par["zero1_shard_group"]
    offload = facts.get("offload", "none")
    if "offload" in fsdp_text.lower() and offload == "none":
        offload = "optimizer+params" if "param" in fsdp_text.lower() else "optimizer"
    plan = TrainPlan(
        tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp if model.is_moe else None, zero=_zero(par, facts, assumptions), sequence_parallel=bool(sp),
        recompute=recompute, micro_batch=int(mb), schedule=_schedule(par.get("schedule"), vpp),
        flash_attention=bool(facts.get("flash_attention", True)), dp_shard=dp_shard,
        offload=offload if offload in ("none", "optimizer", "optimizer+params") else "none",
        overlap_grad_reduce=bool(facts.get("overlap_grad_reduce", "do not use any overlapping" not in record.get("notes", ""))),
        cp_comm=facts.get("cp_comm", "p2p"), tp_overlap=facts.get("tp_overlap", "auto") if tp > 1 and sp else "auto",
    )
    gbps = facts.get("inter_node_gbps")
    cluster = make_cluster(gpu, n_gpus, c.get("gpus_per_node"), gbps, power_limit_w=c.get("power_limit_w"))
    if unknown_speed(record):
        assumptions.append("power limit not stated: estimated at the rated power; the fit uses only the ratios between the source's runs on these GPUs")
    precision, recipe = _precision(str(record.get("precision") or "bf16"), facts)
    training = TrainingSpec(
        seq_len=seq, global_batch=int(gb), precision=precision, fp8_recipe=recipe,
        framework=facts.get("framework", "megatron"), compile=facts.get("compile"),
        attention_kernel=facts.get("attention", "auto"), moe=MoeSpec(**facts.get("moe", {})),
        expandable_segments=facts.get("expandable_segments"), grad_dtype=facts.get("grad_dtype", "fp32"),
    )
    plan = check_plan(model, cluster, training, plan)
    job = TrainJob(model=model, cluster=cluster, training=training, plan=plan, name=record["id"])
    return job if recompute_stated else _least_recompute_that_fits(job, assumptions)


# --- FLOP conventions ----------------------------------------------------------------------------


def flops_per_token(job: TrainJob, convention: str) -> float:
    """FLOPs per token in a source's convention (module docstring of data/calibration_sources.yaml)."""
    model, seq, rc = job.model, job.training.seq_len, job.plan.recompute
    if convention == "model":
        return model_flops_per_token(model, seq)
    if convention == "model_causal":
        return model_flops_per_token(model, seq, causal=True)
    if convention == "hardware":
        return model_flops_per_token(model, seq) + recompute_flops_per_token(model, seq, rc)
    if convention in ("eq3", "eq3_full"):
        full = convention == "eq3_full" or rc == "full"
        return megatron_gpt_flops(1, seq, model.layers, model.hidden, model.vocab, "full" if full else "none") / seq
    raise ShardwiseError(f"unknown FLOP convention {convention!r}")


def _estimator(job: TrainJob) -> Callable[[Constants | None], Any]:
    """The job's estimate under some constants, kept for the last constants asked (a record's figures
    are predicted one after the other with the same constants: one estimate serves them all)."""
    from shardwise.train.estimate import estimate

    last: list[Any] = [None, None]  # [constants, estimate]; constants are immutable, so identity is enough

    def run(c: Constants | None) -> Any:
        if last[1] is None or last[0] is not c:
            last[:] = [c, estimate(job, c, split_p2p=False)]
        return last[1]

    return run


def _predictor(estimate: Callable[[Constants | None], Any], job: TrainJob, metric: str,
               facts: dict[str, Any]) -> Callable[[Constants | None], float]:
    n = job.cluster.num_gpus

    def tokens(c: Constants | None) -> float:
        return estimate(c).tokens_per_s_per_gpu

    if metric == "iteration_s":
        return lambda c: estimate(c).step_time_s
    if metric == "tokens_per_sec_per_gpu":
        return tokens
    if metric in ("tokens_per_sec_total", "tokens_per_sec"):
        return lambda c: tokens(c) * n
    if metric == "samples_per_sec_per_gpu":
        return lambda c: tokens(c) / job.training.seq_len
    if metric in ("samples_per_sec", "samples_per_sec_total"):
        return lambda c: tokens(c) * n / job.training.seq_len
    if metric.startswith("tflops"):
        conv = "hardware" if metric == "tflops_per_gpu_hardware_range" else "model" if metric == "tflops_per_gpu_model" else facts.get("tflops", "model")
        f = flops_per_token(job, conv)
        return lambda c: tokens(c) * f / 1e12
    if metric.startswith("mfu"):
        f = flops_per_token(job, facts.get("mfu", "model"))
        peak = job.cluster.gpu.peak_flops("bf16")
        return lambda c: tokens(c) * f / peak
    raise ShardwiseError(f"no prediction for metric {metric!r}")


def unknown_speed(record: dict[str, Any]) -> str | None:
    """A label shared by the runs of one source on GPUs whose speed the record leaves open: a power limit
    without its value ("B200 (power limited)"). Such runs are estimated at the rated power; the fit uses
    only the ratios between them (:class:`shardwise.calibration.fit.Problem` profiles out their common
    scale), so they order recipes without pulling the GPU's constants."""
    c = record.get("cluster") or {}
    gpu = str(c.get("gpu") or "")
    if c.get("power_limit_w") is None and "power limit" in gpu.lower():
        return f"{record['id'].split('_', 1)[0]}: {gpu}"
    return None


def _tags(job: TrainJob, record: dict[str, Any]) -> dict[str, Any]:
    from shardwise.cost.lowp import low_precision
    from shardwise.cost.stack import stack_profile

    consts = default_constants()
    gpu = job.cluster.gpu
    stack = stack_profile(job.training.framework, gpu.arch, job.training.compile, consts)
    return {
        "gpu_family": consts.family(gpu.name),
        "framework": job.training.framework,
        "fusion": stack.fusion,
        "precision": job.training.precision,
        "recipe": low_precision(job.training, stack, gpu).recipe,
        "moe": job.model.is_moe,
        "long_context": job.training.seq_len >= 16384,
        "small_model": job.model.hidden <= 2048,
        "offload": job.plan.offload != "none",
        "unknown_speed": unknown_speed(record),
    }


def throughput_cases(record: dict[str, Any], source: Source) -> list[Case] | Skip:
    assumptions: list[str] = []
    try:
        job = build_job(record, source, assumptions)
    except ShardwiseError as exc:
        return Skip(record["id"], source.label, str(exc))
    measured = {k: v for k, v in (record.get("measured") or {}).items() if v is not None}
    derived = record.get("derived") or {}
    if "tokens_per_sec_per_gpu" not in measured and isinstance(derived.get("tokens_per_sec_per_gpu"), (int, float)):
        measured.setdefault("tokens_per_sec_per_gpu_derived", derived["tokens_per_sec_per_gpu"])
    facts = source.record_facts(record["id"])
    cases: list[Case] = []
    tags = _tags(job, record)
    run = _estimator(job)

    def peak_gib(c: Constants | None) -> float:
        return run(c).peak_memory_gib

    # A step time counts the step's micro-batches: where the global batch is assumed, not stated, a rate the
    # record also gives (per token, sample or FLOP, which the batch does not set) is scored in its place.
    batch_assumed = any(a.startswith("global_batch=") for a in assumptions)
    rates = [m for m in PRIMARY[1:] if isinstance(measured.get(m), (int, float, list))]
    for metric in (*PRIMARY, "tokens_per_sec_per_gpu_derived"):
        value = measured.get(metric)
        if metric == "iteration_s" and batch_assumed and rates:
            continue
        if isinstance(value, list):
            value = sum(value) / len(value)
        if not isinstance(value, (int, float)):
            continue
        name = metric.removesuffix("_derived")
        cases.append(Case(record["id"], source.label, source.group, metric, "throughput", float(value),
                          _predictor(run, job, name, facts), assumptions, tags, peak_gib, job.cluster.gpu.memory_bytes / 2**30))
        break
    reported = facts.get("memory_metric", "device")  # what the source's memory figure counts (allocator.py)

    def reported_gib(c: Constants | None) -> float:
        e = run(c)
        return {"allocated": e.peak_allocated_gib, "reserved": e.peak_reserved_gib}.get(reported, e.peak_memory_gib)

    for metric in MEMORY:
        value = measured.get(metric)
        if isinstance(value, (int, float)):
            cases.append(Case(record["id"], source.label, source.group, metric, "memory", float(value),
                              reported_gib, assumptions, tags))
    if not cases:
        return Skip(record["id"], source.label, "no measured figure Shardwise predicts")
    try:
        cases[0].predict(None)
    except ShardwiseError as exc:
        return Skip(record["id"], source.label, str(exc))
    return cases

