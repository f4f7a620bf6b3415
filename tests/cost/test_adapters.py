"""LoRA / QLoRA fine-tuning: formulas pinned to the papers' numbers, memory pinned to hand-computed
breakdowns, invariants with hypothesis, and errors that name the field."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.cost.adapters import adapter_params, base_bits_per_weight, quantized_params
from shardwise.errors import ShardwiseError
from shardwise.specs.job import job_from_mapping
from shardwise.specs.model_ref import load_model
from shardwise.specs.training import LoraSpec, TrainingSpec
from shardwise.train.estimate import estimate

GIB = 2**30


def job(model="llama-65b", gpu="L40S", gpus=1, method="qlora", lora=None, seq_len=512, global_batch=16, framework="fsdp",
        **parallel):
    training = {"seq_len": seq_len, "global_batch": global_batch, "method": method, "framework": framework}
    if lora is not None:
        training["lora"] = lora
    plan = {"tp": 1, "pp": 1, "zero": 0, "recompute": "full", "micro_batch": 4, **parallel}
    return job_from_mapping({"model": model, "cluster": {"gpu": gpu, "gpus": gpus}, "training": training, "parallel": plan})


# --- formulas ------------------------------------------------------------------------------------------

def test_nf4_double_quantization_bits_are_the_qlora_papers():
    """QLoRA Sec. 3: constants 32/64 = 0.5 bit per weight; with double quantization 8/64 + 32/(64*256)
    = 0.127 bit, a saving of 0.373 bit (about 3 GB for a 65B model)."""
    assert base_bits_per_weight("nf4", double_quant=False) == 4.5
    assert base_bits_per_weight("nf4", double_quant=True) - 4 == pytest.approx(0.127, abs=5e-4)
    saving = base_bits_per_weight("nf4", False) - base_bits_per_weight("nf4", True)
    assert saving == pytest.approx(0.373, abs=5e-4)
    assert 65e9 * saving / 8 == pytest.approx(3e9, rel=0.02)
    assert base_bits_per_weight("int8") == base_bits_per_weight("fp8") == 8
    assert base_bits_per_weight(None, working_bytes=2) == 16


def test_lora_parameter_count_matches_peft():
    """PEFT's print_trainable_parameters() for LLaMA-7B, r 8 on q_proj and v_proj: 4,194,304 trainable of
    6,742,609,920 (= 2 * 32 layers * 8 * (4096 + 4096))."""
    model = load_model("llama-2-7b")
    per_layer = adapter_params(model, LoraSpec(rank=8, targets=("q", "v")))
    assert model.layers * per_layer == 4_194_304
    assert model.params_total + model.layers * per_layer == 6_742_609_920


def test_lora_gpt3_checkpoint_is_about_35_mb():
    """LoRA Sec. 4.2: GPT-3 175B with r 4 on the query and value projections: a ~35 MB checkpoint (fp16)
    instead of 350 GB."""
    model = load_model("gpt-175b")
    n = model.layers * adapter_params(model, LoraSpec(rank=4, targets=("q", "v")))
    assert n == 96 * 2 * 4 * (12288 + 12288)
    assert 30e6 < 2 * n < 40e6
    assert 2 * model.params_total == pytest.approx(350e9, rel=0.01)


def test_tensor_parallel_adapters_split_b_of_column_layers_and_a_of_row_layers():
    model = load_model("llama-3.1-8b")
    q = LoraSpec(rank=16, targets=("q",))
    o = LoraSpec(rank=16, targets=("o",))
    assert adapter_params(model, q, tp=4) == 16 * (4096 + 4096 / 4)
    assert adapter_params(model, o, tp=4) == 16 * (4096 / 4 + 4096)


# --- memory pinned to hand-computed numbers --------------------------------------------------------------

def test_qlora_65b_memory_breakdown_by_hand():
    """LLaMA-65B (h 8192, ffn 22016, 80 layers, vocab 32000), QLoRA defaults, 1 GPU, ZeRO-0:
    linear weights per layer 4*8192^2 + 3*8192*22016 = 809,500,672 (x80 = 64,760,053,760) in NF4 with
    double quantization (4.127 bits); the other 525,606,912 (embedding, LM head, norms) in bf16; adapters
    r 64 on all seven projections: 64 * (4 * 16384 + 3 * 30208) = 9,994,240 per layer (799,539,200),
    bf16 weight + bf16 gradient + fp32 Adam m and v."""
    e = estimate(job())
    linear = 80 * (4 * 8192**2 + 3 * 8192 * 22016)
    assert linear == 64_760_053_760
    other = 65_285_660_672 - linear
    adapters = 80 * 64 * (4 * (8192 + 8192) + 3 * (8192 + 22016))
    assert adapters == 799_539_200
    base_bytes = linear * (4 + 8 / 64 + 32 / (64 * 256)) / 8 + other * 2
    assert e.memory.params == pytest.approx(base_bytes + 2 * adapters, rel=1e-9)
    assert e.memory.grads == pytest.approx(2 * adapters, rel=1e-9)
    # Adam's 8 B per adapter parameter: what the GPU keeps plus what the paged optimizer holds on the host.
    note = next(n for n in e.notes if n.startswith("qlora"))
    paged_gib = float(note.split("; ")[-1].split(" GiB")[0])
    assert e.memory.optimizer / GIB + paged_gib == pytest.approx(8 * adapters / GIB, abs=0.01)


def test_qlora_65b_fits_one_48gb_gpu_and_a_full_finetune_does_not():
    """QLoRA abstract: 65B on a single 48 GB GPU (L40S: 48 GB, 44.99 GiB as NVML reports), where a
    16-bit full fine-tune needs more than 780 GB."""
    q = estimate(job())
    assert q.fits and q.peak_memory_gib <= 48e9 / GIB
    full = estimate(job(method="full"))
    assert not full.fits
    assert full.memory.params + full.memory.grads + full.memory.optimizer > 780e9
    lora16 = estimate(job(method="lora"))
    assert not lora16.fits and lora16.memory.params > 2 * 65e9  # 16-bit frozen base alone is 130 GB


def test_qlora_33b_fits_one_24gb_gpu_and_a_full_finetune_does_not():
    """The RTX 4090 is a "24 GB" GPU: 24,564 MiB = 23.99 GiB as nvidia-smi shows it."""
    q = estimate(job(model="llama-33b", gpu="RTX-4090", micro_batch=1))
    assert q.fits and q.peak_memory_gib <= 24
    assert not estimate(job(model="llama-33b", gpu="RTX-4090", micro_batch=1, method="full")).fits


def test_paged_optimizer_is_what_lets_65b_fit():
    """Without paging, the Adam states of the 0.8B adapters (6 GiB) stay resident and 65B no longer fits
    at micro-batch 4 (QLoRA Sec. 3: paged optimizers avoid the out-of-memory spikes)."""
    assert estimate(job()).fits
    resident = estimate(job(lora={"paged_optimizer": False}))
    assert not resident.fits
    assert resident.memory.optimizer == pytest.approx(8 * 799_539_200)
    assert resident.time_s.optimizer < estimate(job()).time_s.optimizer  # paging costs host-link time


def test_lora_adds_activations_only_when_something_is_kept():
    """Full recompute keeps only the layer input, so adapters add only to the one layer being recomputed;
    without recompute each target keeps xA (T x r) and, with dropout, the dropped input and its mask."""
    kw = dict(model="llama-2-7b", gpu="A100-80GB", method="lora", micro_batch=1, seq_len=1024)
    base = estimate(job(**kw, lora={"dropout": 0.0, "targets": ["q"], "rank": 8}, recompute="full"))
    more = estimate(job(**kw, lora={"dropout": 0.1, "rank": 64}, recompute="full"))
    # One layer, 1024 tokens: inputs of q, k, v, gate, up (4096 each), o (4096) and down (11008) = 35,584
    # values x 3 B (bf16 copy + mask), plus 7 x 64 x 2 B of xA; less the lean job's 8 x 2 B.
    assert more.memory.activations - base.memory.activations == pytest.approx(1024 * (35584 * 3 + 7 * 64 * 2 - 8 * 2))
    lean = estimate(job(**kw, lora={"dropout": 0.0, "targets": ["q"], "rank": 8}, recompute="none"))
    rich = estimate(job(**kw, lora={"dropout": 0.1, "rank": 8}, recompute="none"))
    # Seven targets with dropout: per layer 1024 tokens x (4 x 4096 + 2 x 4096 + 11008) inputs x 3 B more
    # (bf16 copy + 1-byte mask) and 6 more x (1024 x 8 x 2 B): at least the dropout copies over 32 layers.
    extra = 32 * 1024 * (6 * 4096 + 11008) * 3
    assert rich.memory.activations - lean.memory.activations >= 0.95 * extra


# --- time -------------------------------------------------------------------------------------------

def test_frozen_weights_have_no_weight_gradient_pass():
    """LoRA paper (Hu et al. 2021, Sec. 4.2): no weight gradients for the frozen base, a faster step than
    full fine-tuning with its adapters (Wq and Wv, small rank, no dropout). The QLoRA default (rank 64 on
    every linear, dropout) adds enough adapter work per token that the step need not be faster."""
    kw = dict(model="llama-3.1-8b", gpu="H100-SXM", gpus=8, micro_batch=1, seq_len=4096, global_batch=64)
    full = estimate(job(**kw, method="full", zero=1))
    lora = estimate(job(**kw, method="lora", zero=1, lora={"rank": 4, "targets": ["q", "v"], "dropout": 0.0}))
    assert sum(lora.stage_times_s["W"]) < 0.1 * sum(full.stage_times_s["W"])  # thin adapter GEMMs only
    assert lora.step_time_s < full.step_time_s
    assert lora.time_s.dp_comm <= full.time_s.dp_comm  # only the adapters' gradients are reduced
    assert lora.mfu <= 1 and lora.hfu <= 1


def test_qlora_is_slower_than_lora_by_the_dequantization():
    kw = dict(model="llama-2-7b", gpu="A100-80GB", micro_batch=2, seq_len=2048, global_batch=16)
    lora, qlora = estimate(job(**kw, method="lora")), estimate(job(**kw, method="qlora"))
    assert qlora.step_time_s > lora.step_time_s
    assert qlora.peak_memory_gib < lora.peak_memory_gib


def test_fsdp_shards_the_frozen_base():
    kw = dict(model="llama-3.1-70b", gpu="H100-SXM", gpus=8, micro_batch=1, seq_len=2048, global_batch=16, method="lora")
    replicated, sharded = estimate(job(**kw, zero=0)), estimate(job(**kw, zero=3))
    assert sharded.memory.params == pytest.approx(replicated.memory.params / 8, rel=1e-6)


def test_zero3_gathers_the_frozen_base_but_reduces_only_adapter_gradients():
    from shardwise.cost.overlap import dp_exposed_s
    from shardwise.specs.hardware import make_cluster

    cluster = make_cluster("L40S", 8)
    args = dict(cluster=cluster, overlap_grad_reduce=False, microbatches=1, tp=1, expert_stride=1, p_dense=1e7, p_exp=0.0, n_dense=8,
                n_exp=8, shard=8, weight_bytes=2.0, grad_bytes=2.0, fwd_s=0.0, bwd_s=0.0, dp_overlap=0.0, fsdp_overlap=0.0,
                layers=80)
    adapters_only = dp_exposed_s(zero=3, **args)
    with_base = dp_exposed_s(zero=3, frozen_bytes=35e9, **args)
    assert with_base > adapters_only
    assert dp_exposed_s(zero=1, frozen_bytes=35e9, **args) == dp_exposed_s(zero=1, **args)  # nothing to reduce


def test_full_finetune_is_unchanged_by_the_adapter_fields():
    kw = dict(model="llama-2-7b", gpu="A100-80GB", micro_batch=1, seq_len=2048, global_batch=16)
    plain = job_from_mapping({"model": "llama-2-7b", "cluster": {"gpu": "A100-80GB", "gpus": 1},
                              "training": {"seq_len": 2048, "global_batch": 16, "framework": "fsdp"},
                              "parallel": {"tp": 1, "pp": 1, "zero": 0, "recompute": "full", "micro_batch": 1}})
    assert estimate(job(**kw, method="full")).to_dict() == estimate(plain).to_dict()


PLANS = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4]),
    "pp": st.sampled_from([1, 2]),
    "zero": st.sampled_from([0, 1, 2, 3]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "micro_batch": st.sampled_from([1, 2]),
    "rank": st.sampled_from([4, 16, 64]),
})


@settings(max_examples=25, deadline=None)
@given(p=PLANS)
def test_adapters_never_need_more_memory_than_a_full_finetune(p):
    rank = p.pop("rank")
    kw = dict(model="llama-3.1-8b", gpu="H100-SXM", gpus=8, seq_len=2048, global_batch=16, **p)
    full = estimate(job(**kw, method="full"))
    lora = estimate(job(**kw, method="lora", lora={"rank": rank, "dropout": 0.0, "paged_optimizer": False}))
    qlora = estimate(job(**kw, method="qlora", lora={"rank": rank, "dropout": 0.0, "paged_optimizer": False}))
    assert qlora.memory.params < lora.memory.params
    assert full.memory.params <= lora.memory.params < 1.1 * full.memory.params  # the same base plus adapters
    assert lora.memory.grads + lora.memory.optimizer < 0.1 * (full.memory.grads + full.memory.optimizer)
    assert 0 < lora.mfu_causal <= lora.hfu <= 1
    assert lora.time_s.total == pytest.approx(lora.step_time_s, rel=1e-9)


@settings(max_examples=20, deadline=None)
@given(rank=st.integers(1, 512), targets=st.lists(st.sampled_from(["q", "k", "v", "o", "gate", "up", "down"]), min_size=1, unique=True))
def test_adapter_params_are_linear_in_rank(rank, targets):
    model = load_model("llama-3.1-8b")
    one = adapter_params(model, LoraSpec(rank=1, targets=tuple(targets)))
    assert adapter_params(model, LoraSpec(rank=rank, targets=tuple(targets))) == rank * one
    assert rank * one < quantized_params(model) or rank > 64


# --- errors -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("training,field", [
    ({"method": "full", "lora": {"rank": 8}}, "lora"),
    ({"method": "lora", "lora": {"base_format": "nf4"}}, "lora.base_format"),
    ({"method": "qlora", "lora": {"rank": 0}}, "training.lora.rank"),
    ({"method": "qlora", "lora": {"targets": ["qkv"]}}, "training.lora.targets"),
    ({"method": "dora"}, "training.method"),
])
def test_bad_adapter_settings_name_the_field(training, field):
    with pytest.raises(ShardwiseError, match=field.replace(".", r"\.")):
        job_from_mapping({"model": "llama-2-7b", "cluster": {"gpu": "A100-80GB", "gpus": 1},
                          "training": {"seq_len": 512, "global_batch": 8, **training}, "parallel": {}})


def test_models_adapters_do_not_cover_are_refused():
    with pytest.raises(ShardwiseError, match="training.method.*experts"):
        estimate(job(model="mixtral-8x7b", gpu="H100-SXM", gpus=8, method="lora"))
    with pytest.raises(ShardwiseError, match="training.lora.targets.*gate"):
        estimate(job(model="gpt-1.7b", gpu="A100-80GB", method="lora", lora={"targets": ["gate"]}))
    with pytest.raises(ShardwiseError, match="parallel.offload"):
        job(model="llama-2-7b", gpu="A100-80GB", gpus=2, method="lora", zero=1, offload="optimizer+params")
    assert TrainingSpec(seq_len=8, global_batch=1).adapter is None
    assert TrainingSpec(seq_len=8, global_batch=1, method="qlora").adapter.base_format == "nf4"


def test_tensor_and_pipeline_parallelism_split_the_frozen_base():
    kw = dict(model="llama-3.1-70b", gpu="H100-SXM", gpus=8, micro_batch=1, seq_len=2048, global_batch=16, method="qlora")
    one = estimate(job(**kw, zero=0))
    tp = estimate(job(**kw, tp=8, zero=0, sequence_parallel=True))
    pp = estimate(job(**kw, pp=8, zero=0, schedule="1f1b"))
    # TP splits every frozen weight (and the embedding and LM head); adapters keep A or B whole (docstring).
    model, lora = load_model("llama-3.1-70b"), LoraSpec()
    frozen = one.memory.params - 2 * 80 * adapter_params(model, lora)
    assert tp.memory.params == pytest.approx(frozen / 8 + 2 * 80 * adapter_params(model, lora, tp=8), rel=1e-9)
    assert max(pp.memory_per_rank_gib) < one.peak_memory_gib / 4
    assert tp.time_s.tp_comm > 0 and pp.time_s.bubble > 0
