"""Zero Bubble PP (Qi et al. 2024, ICLR), Table 5: bubble rates from profiled T_F, T_B, T_W, T_comm.

The calibration records ``zb_t5_*`` hold the paper's rates; the profiled times (microseconds) and the
memory model are the authors' inputs to that table, as published in their repository
(github.com/sail-sg/zero-bubble-pipeline-parallelism, ``megatron/core/pipeline_parallel/efficiency.py``,
``iclr_bubble_rates``): M_F = 34h + 5as, M_W = 32h (s = 1024), caps p*M_F (ZB-1p) and 2p*M_F (ZB-2p).
The rate is ``(cost - m(T_F+T_B+T_W)) / cost`` with cost the longest per-rank span: our
``stage_bubble_ratio``.

Obtained: 1F1B, ZB-H1, ZB-H2 equal the table to its 4 decimals in all 12 rows; ``auto`` at 1x memory
equals ZB-1p; at 2x it is within 0.0014 of ZB-2p (0.0446 vs 0.0433 on the first row, equal or lower
elsewhere). The last two p = 32 rows are left to benchmarks/schedules.py (the search takes seconds).
"""

import json
from pathlib import Path

import pytest

import shardwise
from shardwise.pipeline import generate_schedule, simulate
from shardwise.pipeline.auto import auto_schedule

DATA = Path(shardwise.__file__).parent / "data" / "calibration" / "training-measurements.json"

# p, m, T_F, T_B, T_W, T_comm (us), hidden, heads, calibration id
PROFILED = [
    (8, 24, 18522, 18086, 9337, 601, 2304, 24, "zb_t5_1.5B_m24"),
    (8, 32, 18513, 18086, 9331, 626, 2304, 24, "zb_t5_1.5B_m32"),
    (8, 64, 18546, 18097, 9321, 762, 2304, 24, "zb_t5_1.5B_m64"),
    (8, 24, 29718, 29444, 19927, 527, 4096, 32, "zb_t5_6.2B_m24"),
    (8, 32, 29802, 29428, 19530, 577, 4096, 32, "zb_t5_6.2B_m32"),
    (8, 64, 29935, 29621, 19388, 535, 4096, 32, "zb_t5_6.2B_m64"),
    (16, 48, 11347, 11248, 8132, 377, 5120, 40, "zb_t5_14.6B_m48"),
    (16, 64, 11307, 11254, 8101, 379, 5120, 40, "zb_t5_14.6B_m64"),
    (16, 128, 11325, 11308, 8109, 378, 5120, 40, "zb_t5_14.6B_m128"),
    (32, 96, 10419, 10207, 7715, 408, 6144, 48, "zb_t5_28.3B_m96"),
    (32, 128, 10408, 10204, 7703, 408, 6144, 48, "zb_t5_28.3B_m128"),
    (32, 256, 10402, 10248, 7698, 460, 6144, 48, "zb_t5_28.3B_m256"),
]


def paper_rates() -> dict[str, dict[str, float]]:
    if not DATA.exists():
        pytest.skip("calibration data not packaged")
    return {r["id"]: r["measured"]["bubble_rate_theoretical"] for r in json.loads(DATA.read_text())
            if r["kind"] == "pipeline-bubble"}


@pytest.mark.parametrize("p, m, f, b, w, c, h, a, rec", PROFILED, ids=[row[-1] for row in PROFILED])
def test_handcrafted_schedules_reproduce_table5(p, m, f, b, w, c, h, a, rec):
    paper = paper_rates()[rec]
    for ours, theirs in (("1f1b", "1F1B"), ("zb-h1", "ZB-H1"), ("zb-h2", "ZB-H2")):
        res = simulate(generate_schedule(ours, p, m), f, b, w, p2p_s=c)
        assert res.stage_bubble_ratio == pytest.approx(paper[theirs], abs=5e-5), ours


@pytest.mark.parametrize("p, m, f, b, w, c, h, a, rec", PROFILED[:10], ids=[row[-1] for row in PROFILED[:10]])
def test_auto_matches_zb_1p_and_zb_2p(p, m, f, b, w, c, h, a, rec):
    paper = paper_rates()[rec]
    rho = 32 * h / (34 * h + 5 * a * 1024)  # M_W / M_B of the paper's memory model
    got = []
    for cap in (p, 2 * p):
        sched = auto_schedule(p, m, 1, f, b, w, c, mem_cap=cap, w_retained_fraction=rho, objective="stage")
        res = simulate(sched, f, b, w, p2p_s=c, w_retained_fraction=rho)
        assert max(res.peak_activation_microbatches) <= cap + 1e-9
        got.append(res.stage_bubble_ratio)
    assert got[0] == pytest.approx(paper["ZB-1p"], abs=5e-5)
    assert got[1] <= paper["ZB-2p"] + 0.0015
