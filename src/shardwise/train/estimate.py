"""`estimate(job)`: per-GPU memory and step time of one training plan.

Assembly (each piece cited in its module): per-layer F/I/W work from :mod:`shardwise.cost.layer`;
stage contents from :mod:`shardwise.train.stages`; the pipeline makespan from
:mod:`shardwise.train.pipeline_timing` (exact simulation of the schedule); data-parallel
communication and the optimizer step per pipeline rank; memory by placement (:mod:`shardwise.cost.memory`) with activations from
:mod:`shardwise.cost.activations`. What communication stays exposed: :mod:`shardwise.cost.overlap`.
"""

from __future__ import annotations

from shardwise.cost.activations import (
    embedding_activation_bytes,
    full_recompute_working_bytes,
    layer_activation_bytes,
    output_layer_activation_bytes,
    weight_gradient_bytes,
)
from shardwise.cost.comm import group_collective_s
from shardwise.cost.compute import Device
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.flops import model_flops_per_token, recompute_flops_per_token
from shardwise.cost.layer import Groups, embedding, lm_head, transformer_layer
from shardwise.cost.memory import model_state_bytes, optimizer_bytes_per_param
from shardwise.cost.overlap import dp_exposed_s, exposed_layer_comm
from shardwise.specs.job import TrainJob
from shardwise.train.pipeline_timing import pipeline_timing, plan_stages_per_rank, stage_layout
from shardwise.train.result import GIB, Estimate, MemoryBreakdown, TimeBreakdown
from shardwise.train.stages import stage_contents, stage_params


def estimate(job: TrainJob, constants: Constants | None = None, split_p2p: bool = True) -> Estimate:
    """Estimate memory per GPU and step time of `job` (its plan must be checked: dp resolved).
    `split_p2p=False` skips telling point-to-point waits from bubble (one simulation instead of two:
    same step time, for ranking)."""
    consts = constants or default_constants()
    model, cluster, training, plan = job.model, job.cluster, job.training, job.plan
    plan = plan.model_copy(update={"vpp": plan_stages_per_rank(plan)})  # V-shaped schedules hold two
    gpu = cluster.gpu
    tp, pp, vpp, cp, ep, dp = plan.tp, plan.pp, plan.vpp, plan.cp, plan.ep, plan.dp or 1
    m = job.microbatches
    dev = Device.of(gpu, training.precision, consts.compute_for(gpu.name))
    groups = Groups(tp, cp, ep, cluster.tier_for(tp, 1), cluster.tier_for(cp, tp), cluster.tier_for(ep, tp))
    seq = training.seq_len
    tokens = plan.micro_batch * seq / cp
    ab = training.activation_bytes
    sp, rc, flash = plan.sp, plan.recompute, plan.flash_attention

    dense = transformer_layer(model, False, tokens, seq, sp, rc, flash, dev, groups, ab)
    moe = transformer_layer(model, True, tokens, seq, sp, rc, flash, dev, groups, ab) if model.is_moe else dense
    emb, head = embedding(model, tokens, sp, dev, groups, ab), lm_head(model, tokens, sp, dev, groups, ab)
    act_dense = layer_activation_bytes(model, False, tokens, seq, tp, sp, rc, flash, ab)
    act_moe = layer_activation_bytes(model, True, tokens, seq, tp, sp, rc, flash, ab) if model.is_moe else act_dense
    kept = weight_gradient_bytes(model, model.is_moe, tokens, tp, sp, ab)
    w_retained = 1.0 if rc == "full" else min(1.0, kept / (act_moe if model.is_moe else act_dense))

    stages = stage_contents(model, pp * vpp)
    ov = consts.overlap
    f_s, i_s, w_s, acts, exposed = [], [], [], [], []
    for st in stages:
        cost = dense.scaled(st.dense_layers) + moe.scaled(st.moe_layers)
        if st.embedding:
            cost = cost + emb
        if st.lm_head:
            cost = cost + head
        f, i, w, e_tp, e_cp, e_ep = exposed_layer_comm(cost, ov.tp_backward_overlap)
        f_s.append(f)
        i_s.append(i)
        w_s.append(w)
        exposed.append((cost.f_s + cost.i_s + cost.w_s + cost.recompute_s, e_tp, e_cp, e_ep))
        act = st.dense_layers * act_dense + st.moe_layers * act_moe
        if st.embedding:
            act += embedding_activation_bytes(model, tokens, tp, sp)
        acts.append(act)

    # Model states and fixed overheads per pipeline rank (placement: cost/memory.py).
    s2r = stage_layout(plan.schedule, pp, vpp)
    mine = [[s for s in range(pp * vpp) if s2r[s] == r] for r in range(pp)]
    dense_group, expert_group = dp * cp, max(1, dp * cp // ep)
    opt_bpp = optimizer_bytes_per_param(training.precision)
    wb, gb = training.weight_bytes, training.grad_bytes
    mem_const, step_const = consts.memory, consts.step
    fixed = (mem_const.cuda_context_gib + mem_const.comm_buffers_gib) * GIB
    if plan.zero >= 3:
        largest = max(model.layer_params_dense, model.layer_params_moe if model.is_moe else 0) / tp
        fixed += 2 * largest * wb  # current + prefetched layer, gathered
    elif dense_group > 1:
        fixed += 2 * mem_const.dp_bucket_mib * 2**20  # reduce buckets in flight
    params, states = [], []
    for r in range(pp):
        p_dense = p_exp = 0.0
        for s in mine[r]:
            d, e = stage_params(model, stages[s], tp, ep)
            p_dense, p_exp = p_dense + d, p_exp + e
        params.append((p_dense, p_exp))
        states.append(model_state_bytes(p_dense, dense_group, plan.zero, wb, gb, opt_bpp)
                      + model_state_bytes(p_exp, expert_group, plan.zero, wb, gb, opt_bpp))
    extra_act = [0.0] * pp
    extra_act[s2r[-1]] += output_layer_activation_bytes(model, tokens, tp, sp, ab)
    if rc == "full":
        extra_act = [x + full_recompute_working_bytes(model, model.is_moe, tokens, seq, tp, sp, flash, ab) for x in extra_act]
    cap = min((cluster.usable_memory_bytes - states[r].total - fixed) / (1 + mem_const.fragmentation) - extra_act[r] for r in range(pp))

    # Scatter/gather optimisation (Narayanan et al. 2021 Sec. 4.1): each TP rank sends 1/t of the
    # boundary activation; the receiver all-gathers it over the intra-node link.
    p2p_bytes = tokens * model.hidden * ab / tp
    p2p_s = group_collective_s(cluster, "send_recv", p2p_bytes, 2, plan.stride("pp")) if pp > 1 else 0.0
    timing = pipeline_timing(plan.schedule, pp, vpp, m, f_s, i_s, w_s, p2p_s, acts, w_retained, max(cap, max(acts)), split_p2p)

    hbm = gpu.hbm_bytes_s * dev.memory_efficiency
    ranks = []
    for r in range(pp):
        p_dense, p_exp = params[r]
        fwd = sum(f_s[s] for s in mine[r])
        bwd = sum(i_s[s] + w_s[s] for s in mine[r])
        dp_s = dp_exposed_s(cluster, plan.zero, plan.overlap_grad_reduce, m, tp, ep, p_dense, p_exp,
                            dense_group, expert_group, wb, gb, fwd, bwd, ov)
        shard = plan.zero >= 1
        opt_params = p_dense / (dense_group if shard else 1) + p_exp / (expert_group if shard else 1)
        optimizer_s = opt_params * step_const.optimizer_bytes_per_param / hbm
        activations = timing.peak_activation[r] + extra_act[r]
        overheads = fixed + mem_const.fragmentation * activations
        st_ = states[r]
        mem = MemoryBreakdown(float(st_.weights), float(st_.grads), float(st_.optimizer), activations, overheads)
        ranks.append((mem, dp_s, optimizer_s))

    peak_rank = max(range(pp), key=lambda r: ranks[r][0].total)
    dp_s = max(x[1] for x in ranks)
    optimizer_s = max(x[2] for x in ranks)
    crit = timing.critical_rank
    comp = sum(exposed[s][0] for s in mine[crit]) * m
    e_tp, e_cp, e_ep = (sum(exposed[s][k] for s in mine[crit]) * m for k in (1, 2, 3))
    overhead = step_const.step_overhead_s
    step = timing.step_s + dp_s + optimizer_s + overhead
    times = TimeBreakdown(
        compute=comp, tp_comm=e_tp, pp_comm=timing.pp_comm_s, dp_comm=dp_s, cp_comm=e_cp, ep_comm=e_ep,
        bubble=timing.bubble_s, optimizer=optimizer_s, overhead=overhead,
    )
    n = cluster.num_gpus
    tokens_step = training.tokens_per_step
    peak = gpu.peak_flops(training.precision)
    mf = model_flops_per_token(model, seq) * tokens_step
    mf_causal = model_flops_per_token(model, seq, causal=True) * tokens_step
    hf = mf + recompute_flops_per_token(model, seq, rc) * tokens_step
    days = cost = None
    if training.tokens:
        seconds = training.tokens / tokens_step * step
        days = seconds / 86400
        if cluster.price_usd_per_gpu_hour is not None:
            cost = seconds / 3600 * n * cluster.price_usd_per_gpu_hour
    notes = []
    if timing.simulated_microbatches is not None:
        how = "exactly: the steady state repeats" if timing.exact else "approximately: the steady state had not settled"
        searched = " (auto: the schedule searched at that count)" if plan.schedule == "auto" else ""
        notes.append(f"pipeline simulated with {timing.simulated_microbatches:,} of {m:,} micro-batches and extrapolated {how}{searched}")
    if cluster.price_usd_per_gpu_hour is None and training.tokens:
        notes.append(f"no catalog price for {gpu.name}: set cluster.price_usd_per_gpu_hour for cost_usd")
    return Estimate(
        name=job.name,
        model=model.name,
        gpu=gpu.name,
        num_gpus=n,
        plan=plan.model_dump(),
        microbatches=m,
        step_time_s=step,
        time_s=times,
        memory=ranks[peak_rank][0],
        peak_memory_rank=peak_rank,
        memory_per_rank_gib=tuple(x[0].total / GIB for x in ranks),
        gpu_memory_gib=gpu.memory_gib,
        usable_memory_gib=cluster.usable_memory_bytes / GIB,
        tokens_per_s_per_gpu=tokens_step / step / n,
        samples_per_s_per_gpu=training.global_batch / step / n,
        model_tflops_per_gpu=mf / step / n / 1e12,
        mfu=mf / (step * n * peak),
        mfu_causal=mf_causal / (step * n * peak),
        hfu=hf / (step * n * peak),
        bubble_definition=timing.bubble_definition,
        bubble_fraction=timing.bubble_fraction,
        stage_bubble_ratio=timing.stage_bubble_ratio,
        stage_times_s={"F": tuple(f_s), "I": tuple(i_s), "W": tuple(w_s)},
        days_to_train=days,
        cost_usd=cost,
        notes=tuple(notes),
        memory_per_rank=tuple(x[0] for x in ranks),
        pipeline_inputs=timing.inputs,
    )
