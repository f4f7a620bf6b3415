"""Megatron-LM ``pretrain_gpt.py`` arguments for a training plan, and the same plan as Megatron-Bridge
overrides.

Flag names and rules: ``megatron/training/arguments.py`` of NVIDIA/Megatron-LM (core 0.20 main, checked
flag by flag against ``data/engines/megatron.json``, extracted from that parser by
``scripts/extract_engine_flags.py``). The layer split is explicit: ``--pipeline-model-parallel-layout``
(``E`` embedding, ``t`` transformer layer, ``L`` loss/LM head, stages split by ``|``; the number of
stages over pp gives the virtual pipeline size) places the layers as
:func:`shardwise.train.stages.stage_contents` does. ZeRO: 1 = ``--use-distributed-optimizer``; 2 and 3 =
Megatron-FSDP (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads`` /
``optim_grads_params``). Context parallelism: ``--cp-comm-type`` (p2p, a2a, allgather or a2a+p2p, the
last with ``--hierarchical-context-parallel-sizes`` = Ulysses group size, ring size); experts:
``--expert-tensor-parallel-size`` = etp (MoE Parallel Folding). Data: ``--mock-data`` with ``NullTokenizer`` and the model's vocabulary, so the
command runs before a dataset is prepared (replace with ``--data-path`` and a tokenizer).
"""

from __future__ import annotations

from shardwise.engines.table import knob_env, knob_words, offloaded_layers
from shardwise.errors import ShardwiseError
from shardwise.handoff.common import Export, torchrun
from shardwise.pipeline import resolve
from shardwise.specs.job import TrainJob
from shardwise.specs.layer import unknown_parts
from shardwise.specs.model import ModelSpec
from shardwise.train.stages import stage_contents

VERSION = "core_r0.20.0"


#: The parts of the layer's description (shardwise.specs.layer) the flags below give Megatron-LM.
KNOWN_LINEARS = ({("attention", n) for n in ("q", "k", "v", "o", "q_a", "q_b", "kv_a", "kv_b")} | {("router", "router")}
                 | {(b, n) for b in ("mlp", "experts", "shared_experts") for n in ("gate", "up", "down")})
KNOWN_NORMS = {"attention_norm", "mlp_norm", "q_a_norm", "kv_a_norm"}


def model_args(m: ModelSpec, seq_len: int) -> list[str]:
    """Architecture flags of ``pretrain_gpt.py``; ShardwiseError for a part of the layer no flag gives."""
    unknown = unknown_parts(m, KNOWN_LINEARS, KNOWN_NORMS)
    if unknown:
        raise ShardwiseError(f"model {m.name}: no megatron flag builds its {', '.join(unknown)} "
                             "(add them to handoff/megatron.py's model_args)")
    a = ["--num-layers", str(m.layers), "--hidden-size", str(m.hidden), "--num-attention-heads", str(m.heads),
         "--ffn-hidden-size", str(m.ffn), "--seq-length", str(seq_len),
         "--max-position-embeddings", str(max(seq_len, m.position_embeddings))]
    if m.n_kv_heads != m.heads and not m.is_mla:
        a += ["--group-query-attention", "--num-query-groups", str(m.n_kv_heads)]
    if m.head_dim and m.head_dim * m.heads != m.hidden and not m.is_mla:
        a += ["--kv-channels", str(m.head_dim)]
    if m.mlp == "swiglu":
        a.append("--swiglu")
    a += ["--normalization", "RMSNorm" if m.norm == "rmsnorm" else "LayerNorm"]
    a += ["--position-embedding-type", "learned_absolute" if m.position_embeddings else "rope"]
    if not m.tied_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if not m.linear_bias:
        a.append("--disable-bias-linear")
        if m.qkv_bias:
            a.append("--add-qkv-bias")
    if not m.dropout:
        a += ["--attention-dropout", "0", "--hidden-dropout", "0"]
    if m.is_moe:
        a += ["--num-experts", str(m.experts), "--moe-router-topk", str(m.top_k),
              "--moe-ffn-hidden-size", str(m.d_expert)]  # --moe-grouped-gemm: the table's grouped_gemm knob
        if m.shared_experts:
            a += ["--moe-shared-expert-intermediate-size", str(m.shared_experts * m.d_expert)]
        if m.dense_layers:
            a += ["--moe-layer-freq", f"([0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers})"]
    if m.is_mla:
        a += ["--multi-latent-attention", "--kv-lora-rank", str(m.kv_lora_rank),
              "--qk-head-dim", str(m.d_head - m.qk_rope_head_dim), "--qk-pos-emb-head-dim", str(m.qk_rope_head_dim),
              "--v-head-dim", str(m.d_v_head)]
        if m.q_lora_rank:
            a += ["--q-lora-rank", str(m.q_lora_rank)]
    return a


def pipeline_layout(model: ModelSpec, stages: int) -> str:
    """``--pipeline-model-parallel-layout`` of our stage contents, e.g. ``Ettt|tttt|tttL``."""
    parts = []
    for st in stage_contents(model, stages):
        parts.append(("E" if st.embedding else "") + "t" * st.layers + ("L" if st.lm_head else ""))
    return "|".join(parts)


def parallel_args(job: TrainJob) -> list[str]:
    p, tr = job.plan, job.training
    dp = p.dp or 1
    a = ["--tensor-model-parallel-size", str(p.tp), "--pipeline-model-parallel-size", str(p.pp),
         "--context-parallel-size", str(p.cp)]
    if p.cp > 1:  # --cp-comm-type: p2p, a2a, allgather or a2a+p2p (the last with its two group sizes)
        a += ["--cp-comm-type", p.cp_comm]
        if p.cp_comm == "a2a+p2p":
            a += ["--hierarchical-context-parallel-sizes", str(p.cp_a2a), str(p.cp // p.cp_a2a)]
    if job.model.is_moe:
        a += ["--expert-model-parallel-size", str(p.ep), "--expert-tensor-parallel-size", str(p.expert_tp)]
    if p.pp > 1:
        vpp = p.vpp if resolve(p.schedule) == "interleaved" else 1
        a += ["--pipeline-model-parallel-layout", pipeline_layout(job.model, p.pp * vpp)]
    if p.sp:
        a.append("--sequence-parallel")
    if p.recompute == "full":
        a += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    elif p.recompute == "selective":
        a += ["--recompute-granularity", "selective"]
    a += ["--micro-batch-size", str(p.micro_batch), "--global-batch-size", str(tr.global_batch)]
    if p.zero == 1:
        a.append("--use-distributed-optimizer")
    elif p.zero >= 2:  # docs/user-guide/features/megatron_fsdp.md: the distributed optimizer, no fused wgrad accumulation
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy",
              "optim_grads" if p.zero == 2 else "optim_grads_params", "--ckpt-format", "fsdp_dtensor",
              "--use-distributed-optimizer", "--no-gradient-accumulation-fusion"]
    if p.offload == "optimizer":
        a.append("--optimizer-cpu-offload")
    if p.offload_activations > 0:  # layer-level CPU offloading of activations (the nearest layer count)
        a += ["--cpu-offloading-num-layers", str(offloaded_layers(p.offload_activations, job.model.layers))]
    if p.overlap_grad_reduce and dp * p.cp > 1:
        a.append("--overlap-grad-reduce")
        if p.zero >= 1:
            a.append("--overlap-param-gather")
    if tr.precision in ("bf16", "fp8", "fp4"):
        a.append("--bf16")
    elif tr.precision == "fp16":
        a.append("--fp16")
    if tr.low_precision:
        a += ["--transformer-impl", "transformer_engine"]
    a += knob_words("megatron", job)  # fp8/fp4 recipe, TP overlap, micro-batch groups, MoE dispatcher, grouped
    # GEMMs, expert all-to-all overlap
    if not p.flash_attention:
        a += ["--attention-backend", "unfused"]
    return a


def run_args(job: TrainJob) -> list[str]:
    """Data, tokenizer, optimizer and length of the run (mock data; replace for a real run)."""
    tr = job.training
    samples = int(tr.tokens // tr.seq_len) if tr.tokens else 1000 * tr.global_batch
    return ["--train-samples", str(samples), "--lr", "3e-4", "--min-lr", "3e-5", "--lr-decay-style", "cosine",
            "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", str(job.model.vocab),
            "--log-interval", "1", "--eval-iters", "0"]


def export_megatron(job: TrainJob, version: str = VERSION) -> Export:
    from shardwise.engines.support import require_job

    require_job(job, "megatron", version)
    args = model_args(job.model, job.training.seq_len) + parallel_args(job) + run_args(job)
    notes = ["NullTokenizer pads the vocabulary to a multiple of 128 x tp (Megatron's --make-vocab-size-divisible-by)"]
    per_node = min(job.cluster.gpus_per_node, job.cluster.num_gpus)
    # TP/CP want one CUDA connection (validate_args asserts it before Blackwell); Megatron-FSDP asserts the opposite
    env = ({} if job.plan.zero >= 2 else {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}) | knob_env("megatron", job, version)
    return Export("megatron", version, args, torchrun(per_node, job.cluster.nodes, script="pretrain_gpt.py"), env,
                  {}, ("megatron-bridge-overrides.txt", bridge_overrides(job)), notes, title=job.name,
                  script_writes_config=False)


def bridge_overrides(job: TrainJob) -> str:
    """The plan as Megatron-Bridge recipe overrides (``run_recipe.py ... key=value``), one per line:
    ``model.*`` holds the parallel degrees (a ``TransformerConfig`` is a ``ModelParallelConfig``),
    ``train.*`` the batch, ``ddp.*`` and ``optimizer.*`` the data-parallel sharding."""
    p, tr = job.plan, job.training
    o = {
        "model.tensor_model_parallel_size": p.tp, "model.pipeline_model_parallel_size": p.pp,
        "model.context_parallel_size": p.cp, "model.sequence_parallel": p.sp,
        "model.seq_length": tr.seq_len, "train.micro_batch_size": p.micro_batch, "train.global_batch_size": tr.global_batch,
        "ddp.overlap_grad_reduce": p.overlap_grad_reduce, "ddp.use_distributed_optimizer": p.zero >= 1,
        "optimizer.use_distributed_optimizer": p.zero >= 1,
    }
    if job.model.is_moe:
        o["model.expert_model_parallel_size"] = p.ep
        o["model.expert_tensor_parallel_size"] = p.expert_tp
    if p.cp > 1:
        o["model.cp_comm_type"] = p.cp_comm
        if p.cp_comm == "a2a+p2p":
            o["model.hierarchical_context_parallel_sizes"] = [p.cp_a2a, p.cp // p.cp_a2a]
    if p.pp > 1 and resolve(p.schedule) == "interleaved":
        o["model.virtual_pipeline_model_parallel_size"] = p.vpp
    if p.pp > 1:
        o["model.pipeline_model_parallel_layout"] = pipeline_layout(job.model, p.pp * (p.vpp if resolve(p.schedule) == "interleaved" else 1))
    if p.recompute != "none":
        o["model.recompute_granularity"] = p.recompute
        if p.recompute == "full":
            o["model.recompute_method"] = "uniform"
            o["model.recompute_num_layers"] = 1
    if p.zero >= 2:
        o["ddp.data_parallel_sharding_strategy"] = "optim_grads" if p.zero == 2 else "optim_grads_params"
        o["ddp.use_megatron_fsdp"] = True

    def fmt(v: object) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        if isinstance(v, list):
            return "[" + ",".join(map(str, v)) + "]"
        return f'"{v}"' if isinstance(v, str) else str(v)

    return "".join(f"{k}={fmt(v)}\n" for k, v in o.items())
