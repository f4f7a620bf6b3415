"""`estimate(job)`: per-GPU memory and step time of one training plan.

Assembly (each piece cited in its module): per-layer F/I/W work from :mod:`shardwise.cost.layer`;
stage contents from :mod:`shardwise.train.stages`; the pipeline makespan from
:mod:`shardwise.train.pipeline_timing` (exact simulation of the schedule); data-parallel
communication and the optimizer step per pipeline rank; memory by placement (:mod:`shardwise.cost.memory`) with activations from
:mod:`shardwise.cost.activations`. What communication stays exposed: :mod:`shardwise.cost.overlap`.
Activation offload (parallel.offload_activations): :mod:`shardwise.cost.act_offload`, its copies timed
against the schedule's forward-to-backward gaps (:func:`shardwise.train.pipeline_timing.forward_backward_gaps`).
"""

from __future__ import annotations

from collections.abc import Sequence

from shardwise.cost.act_offload import activation_offload, selective_shares
from shardwise.cost.adapters import adapter_model_flops_per_token, adapter_note
from shardwise.cost.allocator import fragmentation_share, runtime_bytes
from shardwise.cost.constants import Constants, default_constants
from shardwise.cost.flops import model_flops_per_token, recompute_flops_per_token
from shardwise.cost.lowp import job_device
from shardwise.cost.stack import attention_kernel, expandable_segments, keeps_unsharded, stack_profile, tp_overlap_mode
from shardwise.cost.step import host_capacity_bytes, host_link_gbyte_s
from shardwise.pipeline import schedule_info
from shardwise.specs.hardware import Cluster
from shardwise.specs.job import TrainJob
from shardwise.specs.layout import Layout
from shardwise.train.assembly import (
    Costing,
    RankTail,
    activation_room,
    blocks,
    boundary_p2p_s,
    rank_contents,
    rank_loads,
    rank_memory,
    rank_tails,
    stage_works,
    stages_of_rank,
    step_parts,
    time_breakdown,
)
from shardwise.train.error_band import error_band
from shardwise.train.pipeline_timing import check_group, forward_backward_gaps, pipeline_timing, plan_stages_per_rank
from shardwise.train.result import GIB, Estimate
from shardwise.train.stages import stage_contents


def estimate(job: TrainJob, constants: Constants | None = None, split_p2p: bool = True) -> Estimate:
    """Estimate memory per GPU and step time of `job` (its plan must be checked: dp resolved).
    `split_p2p=False` skips telling point-to-point waits from bubble (one simulation instead of two:
    same step time, for ranking)."""
    consts = constants or default_constants()
    model, cluster, training, plan = job.model, job.cluster, job.training, job.plan
    vpp = plan_stages_per_rank(plan)  # V-shaped schedules hold two
    gpu = cluster.gpu
    m = job.microbatches
    stack = stack_profile(training.framework, gpu.arch, training.compile, consts)
    tpo = tp_overlap_mode(plan, stack)
    if (vpp, tpo) != (plan.vpp, plan.tp_overlap):
        plan = plan.model_copy(update={"vpp": vpp, "tp_overlap": tpo})  # reported as resolved
    check_group(plan, m)
    dev, lowp = job_device(gpu, training, consts, stack, attention_kernel(training, stack))
    seq, rc, flash = training.seq_len, plan.recompute, plan.flash_attention
    layout = Layout.of(plan)
    tp, pp, ep = layout.tp, layout.pp, layout.ep
    ctx = Costing(model, training, cluster, consts, stack, dev, lowp)
    b = blocks(ctx, layout, flash, tpo)

    stages = stage_contents(model, pp * vpp)
    work = stage_works(b, stages)
    f_s, i_s, w_s, acts = [x.f for x in work], [x.i for x in work], [x.w for x in work], [x.act for x in work]

    # What each pipeline rank holds; its model states, fixed memory, DP communication and optimizer step.
    s2r = schedule_info(plan.schedule).stage_to_rank(pp, vpp)
    mine = stages_of_rank(s2r, pp, vpp)
    loads = rank_loads(rank_contents(model, stages, mine, tp, ep), work, mine)
    keep = keeps_unsharded(plan, stack)
    tails = rank_tails(ctx, layout, loads, microbatches=m, offload=plan.offload, offload_device=plan.offload_device,
                       overlap_grad_reduce=plan.overlap_grad_reduce, keep_unsharded=keep, unsharded_grads=keep and pp > 1)
    frag = fragmentation_share(consts.memory, expandable_segments(training, stack))
    runtime = runtime_bytes(consts.memory)
    extra_act = [b.act.extra(r == s2r[-1]) for r in range(pp)]
    lora = training.adapter
    paged = lora is not None and bool(lora.paged_optimizer)
    cap = min(activation_room(ctx, t, extra_act[r], frag, paged) for r, t in enumerate(tails))
    p2p_s = boundary_p2p_s(cluster, model, training, layout) if pp > 1 else 0.0
    timing = pipeline_timing(plan.schedule, pp, vpp, m, f_s, i_s, w_s, p2p_s, acts, b.w_retained, max(cap, max(acts)), split_p2p,
                             plan.microbatch_group)

    # Activation offload (cost/act_offload.py): the peak falls by the share, the copies hide in the schedule's gaps.
    share = plan.offload_activations
    link = host_link_gbyte_s(cluster) * consts.step.pcie_efficiency  # achieved, as the offloaded states' copies
    if share > 0:
        gaps = forward_backward_gaps(timing.inputs)
        shares = [share] * pp
        if plan.offload_activations_policy == "selective":
            shares = selective_shares(share, timing.peak_activation, [min(max(acts[s] for s in mine[r]), timing.peak_activation[r])
                                                                      for r in range(pp)])
        offloaded = [activation_offload(shares[r], timing.peak_activation[r], [acts[s] for s in mine[r]], [gaps[s] for s in mine[r]],
                                        link, m, timing.step_s, [f_s[s] + i_s[s] for s in mine[r]],
                                        float(tails[r].host.link_bytes) if tails[r].host is not None else 0.0)
                     for r in range(pp)]
    else:  # nothing offloaded (activation_offload's answer without building its per-stage arguments)
        offloaded = [activation_offload(share, peak, (), (), link, m, timing.step_s) for peak in timing.peak_activation]
    act_offload_s = max(o.exposed_s for o in offloaded)

    mems = [rank_memory(ctx, t, offloaded[r].peak_bytes + extra_act[r], frag, paged) for r, t in enumerate(tails)]
    paged_gib = (max(float(t.states.optimizer) - float(mem.states.optimizer) for t, mem in zip(tails, mems, strict=True)) / GIB
                 if paged else 0.0)
    ranks = [mem.breakdown(runtime) for mem in mems]
    totals = [x.total for x in ranks]
    peak_rank = max(range(pp), key=totals.__getitem__)
    parts = step_parts(ctx, timing.step_s, cluster.nodes, max(float(t.dp_s) for t in tails),
                       max(float(t.optimizer_s) + float(mem.paging_s) for t, mem in zip(tails, mems, strict=True)), act_offload_s)
    step = parts.total
    times = time_breakdown(timing, work, mine, m, parts)
    n = cluster.num_gpus
    tokens_step = training.tokens_per_step
    peak = gpu.peak_flops("bf16" if training.low_precision else training.precision)  # MFU of fp8/fp4 runs: vs the BF16 peak
    mf = model_flops_per_token(model, seq) * tokens_step
    mf_causal = model_flops_per_token(model, seq, causal=True) * tokens_step
    if lora is not None:  # frozen weights skip their weight gradients (cost/adapters.py)
        mf = adapter_model_flops_per_token(model, lora, mf / tokens_step) * tokens_step
        mf_causal = adapter_model_flops_per_token(model, lora, mf_causal / tokens_step) * tokens_step
    # HFU: the FLOPs the GPUs execute, so causal attention is counted as done and recompute as the stack does it
    hf = mf_causal + recompute_flops_per_token(model, seq, rc, causal=True, flash=flash,
                                               gemm_share=stack.selective_recompute_gemms) * tokens_step
    days = cost = None
    if training.tokens:
        seconds = training.tokens / tokens_step * step
        days = seconds / 86400
        if cluster.price_usd_per_gpu_hour is not None:
            cost = seconds / 3600 * n * cluster.price_usd_per_gpu_hour
    notes = []
    host_use = host_memory(cluster, tails, plan.offload, plan.offload_device, notes, [o.host_bytes for o in offloaded])
    if share > 0:
        policy = " (selective: ranks with the highest peaks first)" if plan.offload_activations_policy == "selective" else ""
        notes.append(f"activation offload: {share:.0%}{policy} of each micro-batch's activations to host memory over "
                     f"{link:.0f} GB/s achieved per GPU; peak activations {timing.peak_activation[peak_rank] / GIB:.2f}"
                     f" -> {offloaded[peak_rank].peak_bytes / GIB:.2f} GiB on rank {peak_rank}; {act_offload_s:.3g} s per step "
                     "exposed (the rest hidden behind the forward-to-backward gaps)")
    if model.is_moe:
        notes.append(f"MoE routing: {training.moe.assumption()}; {training.moe.dispatcher} dispatch over ep {ep}, "
                     f"expert all-to-all {times.ep_comm:.3g} s per step (exposed)")
        if plan.expert_tp != tp:
            notes.append(f"etp {plan.expert_tp} != tp {tp} (MoE Parallel Folding): experts split over etp x ep = "
                         f"{plan.expert_tp * ep}, their data-parallel group {layout.group('edp')}")
    if training.low_precision:
        notes.append(f"MFU and HFU are against the BF16 peak ({peak / 1e12:.0f} TFLOP/s); {lowp.recipe} {training.precision} "
                     "GEMMs run the block linears, attention and the LM head stay in BF16")
    if timing.simulated_microbatches is not None:
        how = "exactly: the steady state repeats" if timing.exact else "approximately: the steady state had not settled"
        searched = " (auto: the schedule searched at that count)" if schedule_info(plan.schedule).takes_costs else ""
        notes.append(f"pipeline simulated with {timing.simulated_microbatches:,} of {m:,} micro-batches and extrapolated {how}{searched}")
    if lora is not None:
        notes.append(adapter_note(model, training, lora, paged_gib))
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
        memory=ranks[peak_rank],
        peak_memory_rank=peak_rank,
        memory_per_rank_gib=tuple(t / GIB for t in totals),
        gpu_memory_gib=gpu.memory_gib,
        usable_memory_gib=cluster.usable_memory_bytes / GIB,
        tokens_per_s_per_gpu=tokens_step / step / n,
        samples_per_s_per_gpu=training.global_batch / step / n,
        model_tflops_per_gpu=mf / step / n / 1e12,
        mfu=mf / (step * n * peak),
        mfu_causal=mf_causal / (step * n * peak),
        hfu=hf / (step * n * peak),
        mfu_limit=gpu.peak_flops(training.precision) / peak,
        bubble_definition=timing.bubble_definition,
        bubble_fraction=timing.bubble_fraction,
        stage_bubble_ratio=timing.stage_bubble_ratio,
        stage_times_s={"F": tuple(f_s), "I": tuple(i_s), "W": tuple(w_s)},
        days_to_train=days,
        cost_usd=cost,
        notes=tuple(notes),
        stack=stack.knobs(),
        error_band=error_band(gpu.name, training.framework,
                              "moe" if model.is_moe else "fp8" if training.low_precision else "dense"),
        memory_per_rank=tuple(ranks),
        pipeline_inputs=timing.inputs,
        fp8_recipe=lowp.recipe if lowp.active else None,
        moe_dispatcher=training.moe.dispatcher if model.is_moe else None,
        host_memory=host_use,
    )


def host_memory(cluster: Cluster, tails: Sequence[RankTail], offload: str, device: str, notes: list[str],
                activations: list[float] | None = None) -> dict | None:
    """Host DRAM and NVMe a node's offload uses against what it has (None: nothing offloaded). Every GPU of
    a node offloads at once: the node holds `gpus on the node` x the largest rank's bytes (an upper bound
    where a node's GPUs hold different pipeline stages). Available: the DRAM less HOST_MEMORY_RESERVE (the
    OS and the data loaders), plus any CXL memory (`dram_available_gib` counts both; cost/step.py). `activations`: each rank's offloaded activations at its peak
    (cost/act_offload.py), counted in host DRAM beside the states."""
    acts = max(activations or [0.0])
    if offload == "none" and acts <= 0.0:
        return None
    per_node = min(cluster.gpus_per_node, cluster.num_gpus)
    states = [(float(t.host.dram), float(t.host.nvme)) if t.host is not None else (0.0, 0.0) for t in tails]
    dram = per_node * max(d + (activations[r] if activations else 0.0) for r, (d, _) in enumerate(states))
    nvme = per_node * max(n for _, n in states)
    tiers = cluster.host
    avail = host_capacity_bytes(tiers.dram_gib, tiers.cxl_gib)
    if avail is None:
        notes.append(f"host memory not checked: the catalog has no host DRAM figure for {cluster.gpu.name} nodes "
                     f"(offload needs {dram / GIB:,.0f} GiB per node); set cluster.host.dram_gib")
    out = {"device": device if offload != "none" else "cpu", "gpus_per_node": per_node, "dram_used_gib": dram / GIB,
           "activations_gib": per_node * acts / GIB,
           "dram_available_gib": None if avail is None else avail / GIB, "cxl_gib": tiers.cxl_gib,
           "nvme_used_tb": nvme / 1e12,
           "nvme_available_tb": tiers.nvme_tb if device == "nvme" and offload != "none" else None}
    return out
