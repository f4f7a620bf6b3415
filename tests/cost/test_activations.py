"""Activation memory pinned to Korthikanti et al. 2022 Table 2 and Figure 7."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardwise.cost.activations import layer_activation_bytes
from shardwise.specs.model_ref import load_model
from shardwise.train.pipeline_timing import pipeline_timing
from shardwise.train.stages import stage_contents

GPT = load_model("gpt-22b")  # GPT: GeLU MLP with ffn = 4h, dropout, MHA
s, b, h, a = 2048, 4, GPT.hidden, GPT.heads
SBH = s * b * h


@pytest.mark.parametrize(
    "tp,sp,recompute,table2",
    [
        (1, False, "none", SBH * (34 + 5 * a * s / h)),  # no parallelism
        (8, False, "none", SBH * (10 + 24 / 8 + 5 * a * s / (h * 8))),  # tensor parallel
        (8, True, "none", SBH / 8 * (34 + 5 * a * s / h)),  # tensor + sequence parallel
        (8, False, "selective", SBH * (10 + 24 / 8)),  # tensor parallel + selective recompute
        (8, True, "selective", SBH * 34 / 8),  # tensor + sequence parallel + selective recompute
        (1, False, "full", 2 * SBH),  # full recompute keeps the layer input
    ],
)
def test_table2_rows(tp, sp, recompute, table2):
    assert layer_activation_bytes(GPT, False, s * b, s, tp, sp, recompute, flash=False) == pytest.approx(table2)


def test_flash_attention_equals_selective_up_to_lse():
    flash = layer_activation_bytes(GPT, False, s * b, s, 8, True, "none", flash=True)
    selective = layer_activation_bytes(GPT, False, s * b, s, 8, True, "selective", flash=False)
    lse = 4 * s * b * a / 8  # fp32 log-sum-exp per query and head
    assert flash == pytest.approx(selective + lse)


@pytest.mark.parametrize(
    "name,pp,vpp,micro,tp_only_gib,sp_sel_gib",
    [
        ("gpt-22b", 1, 1, 4, 59.25, 9.5625),
        ("gpt-175b", 8, 3, 1, 66.8438, 12.3516),
        ("gpt-530b", 35, 3, 1, 114.023, 23.0762),
        ("gpt-1t", 64, 1, 1, 131.25, 26.5625),
    ],
)
def test_figure7_first_stage_activations(name, pp, vpp, micro, tp_only_gib, sp_sel_gib):
    """First-stage activations: L layers' worth under 1F1B, x(1 + (p-1)/(pv)) interleaved (Fig. 7)."""
    model = load_model(name)
    stages = stage_contents(model, pp * vpp)
    zeros = [0.0] * len(stages)
    sched = "interleaved" if vpp > 1 else "1f1b"
    for sp, rc, expected in ((False, "none", tp_only_gib), (True, "selective", sp_sel_gib)):
        per_layer = layer_activation_bytes(model, False, micro * s, s, 8, sp, rc, flash=False)
        acts = [st_.layers * per_layer for st_ in stages]
        peak = pipeline_timing(sched, pp, vpp, 16 * pp, zeros, zeros, zeros, 0.0, acts).peak_activation[0]
        assert peak / 2**30 == pytest.approx(expected, rel=2e-5)


@given(tp=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(), rc=st.sampled_from(["none", "selective", "full"]), flash=st.booleans(), moe=st.booleans())
def test_more_tensor_parallelism_never_needs_more_activation_memory(tp, sp, rc, flash, moe):
    model = load_model("mixtral-8x7b")
    one = layer_activation_bytes(model, moe, 4096, 4096, tp, sp, rc, flash)
    two = layer_activation_bytes(model, moe, 4096, 4096, tp * 2, sp, rc, flash)
    assert two <= one


def test_recompute_ordering():
    model = load_model("llama-3.1-70b")
    none = layer_activation_bytes(model, False, 8192, 8192, 8, True, "none", flash=False)
    sel = layer_activation_bytes(model, False, 8192, 8192, 8, True, "selective", flash=False)
    full = layer_activation_bytes(model, False, 8192, 8192, 8, True, "full", flash=False)
    assert full < sel < none


def test_selective_that_repeats_gemms_keeps_that_share_as_full_recompute():
    # a stack whose `selective` repeats half the forward GEMMs (every second block checkpointed): half the
    # layer keeps Table 2's tensor + sequence parallel + selective 34sbh/t, half only the input 2sbh/t
    got = layer_activation_bytes(GPT, False, s * b, s, 8, True, "selective", flash=False, gemm_share=0.5)
    assert got == pytest.approx(0.5 * SBH * 34 / 8 + 0.5 * 2 * SBH / 8)
    assert got == pytest.approx(SBH * 18 / 8)
