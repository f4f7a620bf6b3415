"""Records that reproduce a paper's formula or a measured layer time rather than a training run:
Korthikanti et al. 2022 Table 4 (one 22B layer's forward/backward on 8 A100s), Korthikanti Fig. 1/7
(activation memory), ZeRO Fig. 1 (model states) and Zero Bubble Table 5 (bubble rates from the
authors' profiled stage times). Their cases are category "formula" or "time", kept out of the
throughput error that the fit and the cross-validation report."""

from __future__ import annotations

import csv
from collections.abc import Callable
from typing import Any

from shardwise.calibration.records import Case, Skip, _first_word, _model, resolve_gpu
from shardwise.calibration.sources import Source
from shardwise.cost.constants import Constants, default_constants
from shardwise.specs.hardware import make_cluster
from shardwise.specs.model import ModelSpec


def layer_cases(record: dict[str, Any], source: Source) -> list[Case]:
    """Korthikanti et al. 2022 Table 4: forward and backward time of one 22B layer on 8 A100s."""
    from shardwise.cost.device import Device
    from shardwise.cost.layer import Groups, transformer_layer
    from shardwise.cost.stack import stack_profile

    m, par = record["model"], record["parallel"]
    spec = ModelSpec(name="gpt-22b-layer", layers=1, hidden=m["hidden"], heads=m["heads"], ffn=m["ffn"], vocab=51200,
                     mlp="gelu", norm="layernorm", linear_bias=True, tied_embeddings=True, dropout=True)
    cluster = make_cluster(resolve_gpu(record["cluster"]["gpu"]), record["cluster"]["n_gpus"])
    tp, sp, rc = par["tp"], bool(par["sequence_parallel"]), _first_word(par["recompute"])
    tokens = par["micro_batch"] * m["seq_len"]

    def cost(c: Constants | None) -> tuple[float, float]:
        consts = c or default_constants()
        stack = stack_profile("megatron", cluster.gpu.arch, None, consts)
        dev = Device.of(cluster.gpu, "bf16", consts.compute_for(cluster.gpu.name), "fa2")
        tier = cluster.tier_for(tp, 1)
        pc = transformer_layer(spec, False, tokens, m["seq_len"], sp and tp > 1, rc, False, dev, Groups(tp, 1, 1, tier, tier, tier), stack)
        return pc.f_s + pc.tp_fwd_s, pc.i_s + pc.w_s + pc.recompute_s + pc.tp_bwd_s * (1 - stack.tp_comm_overlap)

    meas = record["measured"]
    return [
        Case(record["id"], source.label + " Table 4", source.group, "forward_ms", "time", meas["forward_ms"], lambda c: 1e3 * cost(c)[0]),
        Case(record["id"], source.label + " Table 4", source.group, "backward_ms", "time", meas["backward_ms"], lambda c: 1e3 * cost(c)[1]),
    ]


def activation_cases(record: dict[str, Any], source: Source) -> list[Case]:
    """Korthikanti et al. 2022 Fig. 1/7 (analytical): first-stage activations, TP only and TP+SP+selective."""
    from shardwise.cost.activations import layer_activation_bytes
    from shardwise.train.pipeline_timing import pipeline_timing
    from shardwise.train.stages import stage_contents

    m, par = record["model"], record["parallel"]
    assumptions: list[str] = []
    spec = _model(m, {"vocab": 51200}, assumptions)
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
        cases.append(Case(record["id"], source.label + " Fig. 7", source.group, metric, "formula", record["measured"][metric],
                          lambda c, v=peak: v / 2**30, assumptions))
    return cases


def zero_cases(record: dict[str, Any], source: Source) -> list[Case]:
    """ZeRO Fig. 1: per-GPU model states of a 7.5B model on 64 GPUs, stages 0-3, in GB (1e9)."""
    from shardwise.cost.memory import model_state_bytes

    psi, nd = record["model"]["params"], record["parallel"]["dp"]
    out = []
    for stage, (name, value) in enumerate(record["measured"]["per_gpu_model_state_gb"].items()):
        pred = model_state_bytes(psi, nd, stage, 2, 2, 12).total / 1e9
        out.append(Case(record["id"], "ZeRO Fig. 1 (model states)", source.group, f"model_states_gb[{name}]", "formula", value, lambda c, v=pred: v))
    return out


def bubble_cases(record: dict[str, Any], source: Source) -> list[Case] | Skip:
    """Zero Bubble Table 5: the paper's bubble rates (on the longest per-rank span) from the authors'
    profiled T_F, T_B, T_W, T_comm (data/zero_bubble_profiled.csv), for its handcrafted schedules."""
    from shardwise.pipeline import generate_schedule, simulate
    from shardwise.specs._loading import data_path

    with open(data_path("zero_bubble_profiled.csv")) as fh:
        rows = {r["record"]: r for r in csv.DictReader(line for line in fh if not line.startswith("#"))}
    row = rows.get(record["id"])
    if row is None:
        return Skip(record["id"], source.label, "no profiled stage times for this bubble record")
    p, m = int(row["pp"]), int(row["microbatches"])
    f, b, w, c = (float(row[k]) for k in ("t_f_us", "t_b_us", "t_w_us", "t_comm_us"))
    rates = record["measured"]["bubble_rate_theoretical"]

    def rate(name: str) -> Callable[[Constants | None], float]:
        return lambda _c: simulate(generate_schedule(name, p, m), f, b, w, p2p_s=c).stage_bubble_ratio

    ours = {"1F1B": "1f1b", "ZB-H1": "zb-h1", "ZB-H2": "zb-h2"}
    label = "Zero Bubble Table 5 (bubble)"
    return [Case(record["id"], label, source.group, f"bubble_rate[{k}]", "formula", rates[k], rate(v)) for k, v in ours.items() if k in rates]
