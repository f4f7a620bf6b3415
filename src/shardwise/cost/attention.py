"""Time of a fused attention kernel (FlashAttention-2/3, cuDNN) from its shape: a tile model.

A fused attention kernel (Dao 2023, FlashAttention-2 Sec. 3.1-3.3; Shah et al. 2024, FlashAttention-3 Sec.
3) runs one thread block (CTA) per (batch, head, tile of TILE query rows) in the forward and per (batch,
head, tile of TILE keys) in the backward; each loops over the tiles of the other side it sees. So:

- a CTA's time is (c0 + t) tile steps, t the tiles it sees (under a causal mask the prefix, the diagonal tile
  computed whole) and c0 the loop's fixed part in tile units (loading its own tile, writing the output and
  the log-sum-exp, or dK/dV in the backward): short loops run below the kernel's asymptote;
- CTAs run one per SM at a time, in waves: fewer CTAs than SMs leave SMs idle, and the longest CTA bounds
  the kernel;
- one tile step runs at the kernel's asymptotic rate for head dimension 128, eta x peak / SMs per SM,
  times a factor for other head dimensions, linear in log2(d) between the kernel's factors at 64 and 256
  (small heads do little math per byte loaded; large ones shrink the tiles to fit shared memory);
- useful FLOPs: forward 4 s_q s_k d per (batch, head) (QK^T and PV; d the mean of the QK and V head
  dimensions), about half under a causal mask; backward 2.5x the forward (FlashAttention-2 Sec. 3: five
  matmuls against two), at `bwd_ratio` of the forward's rate.

The kernel constants (eta per GPU family in :class:`shardwise.cost.constants.ComputeConstants`; bwd_ratio,
c0 and the head-dim factors per kernel in :class:`AttentionShape`) are fitted by ``scripts/fit_attention.py`` on the
kernel benchmarks in ``data/calibration/attention-kernels.yaml`` (FlashAttention-2 and -3 papers' figures).
Every argument may be a number; the result is seconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from functools import lru_cache

from shardwise.specs._loading import data_path

TILE = 128  # rows of a query or key tile (FlashAttention-2/3's 128-row tiles at head dim 128)


@dataclass(frozen=True)
class AttentionShape:
    """The shape constants of one attention kernel (module docstring): tile-loop overhead and head-dim scaling."""

    c0_fwd: float = 1.9  # derived: FA3 forward on H100 at head dim 128 (pytorch/benchmark ff65cb6) as a saturation in s
    c0_bwd: float = 1.9  # assumed: as the forward until fitted
    bwd_ratio: float = 63.0 / 73.0  # cited: FlashAttention-2 Sec. 4.1 (A100): backward 63% vs forward 73% of peak
    d64: float = 0.8  # assumed: rate at head dim 64 over head dim 128's
    d256: float = 1.0  # assumed: rate at head dim 256 over head dim 128's

    def head_dim_factor(self, d: float) -> float:
        """Rate at head dimension `d` over head dim 128's: linear in log2(d) through (64, d64), (128, 1),
        (256, d256), held beyond the ends."""
        x = min(max(math.log2(max(d, 1.0)), 6.0), 8.0) - 7.0
        return 1.0 + x * ((1.0 - self.d64) if x < 0 else (self.d256 - 1.0))


def _tiles(s: float) -> int:
    return max(1, math.ceil(s / TILE))


def tile_steps(s_q: float, s_k: float, causal: bool, backward: bool, c0: float) -> tuple[float, float, float]:
    """(total tile steps over the CTAs of one (batch, head), CTAs, steps of the longest CTA). Under a causal
    mask the queries are the last s_q of the s_k positions (a chunk's own keys and those before it)."""
    n_q, n_k = _tiles(s_q), _tiles(s_k)
    if not causal:
        outer, inner = (n_k, n_q) if backward else (n_q, n_k)
        return outer * (c0 + inner), outer, c0 + inner
    offset = n_k - n_q  # key tiles before the first query tile
    if backward:  # key tile j is seen by the query tiles at or after it: n_q for j <= offset, then n_q - 1 ... 1
        seen = (offset + 1) * n_q + n_q * (n_q - 1) / 2.0
        return c0 * n_k + seen, n_k, c0 + n_q
    # query tile i sees the key tiles up to its diagonal: offset + 1 ... offset + n_q
    seen = n_q * offset + n_q * (n_q + 1) / 2.0
    return c0 * n_q + seen, n_q, c0 + n_k


def useful_flops(bh: float, s_q: float, s_k: float, d: float, causal: bool) -> float:
    """Forward FLOPs of QK^T and PV over `bh` (batch x heads) pairs; causal: the visible (query, key) pairs."""
    if causal:
        pairs = s_q * (s_k - s_q) + s_q * (s_q + 1) / 2.0
    else:
        pairs = s_q * s_k
    return 4.0 * bh * pairs * d


def fused_attention_s(bh: float, s_q: float, s_k: float, d: float, causal: bool, backward: bool, peak_flops: float,
                      eta: float, shape: AttentionShape, sms: int, bytes_moved: float = 0.0, hbm_rate: float = math.inf,
                      launch_s: float = 0.0) -> float:
    """Seconds of one fused attention kernel over `bh` (batch x heads) pairs of `s_q` queries and `s_k` keys of
    head dimension `d` (module docstring); never faster than moving `bytes_moved` at `hbm_rate`."""
    if bh <= 0 or s_q <= 0 or s_k <= 0:
        return 0.0
    c0 = shape.c0_bwd if backward else shape.c0_fwd
    steps, ctas, longest = tile_steps(s_q, s_k, causal, backward, c0)
    total_ctas = bh * ctas
    waves = max(math.ceil(total_ctas / sms) * steps / ctas, longest)  # balanced waves, bounded by the longest CTA
    rate = eta * (shape.bwd_ratio if backward else 1.0) * shape.head_dim_factor(d)
    per_step = 4.0 * TILE * TILE * d * (2.5 if backward else 1.0) * sms / (peak_flops * rate)
    return max(waves * per_step, bytes_moved / hbm_rate) + launch_s


ATTENTION_CONSTANTS_FILE = "attention_constants.json"
KERNELS = ("fa2", "fa3", "cudnn")  # FlashAttention-2 (also SDPA's flash backend); FlashAttention-3; cuDNN (TE, XLA)


@lru_cache(maxsize=1)
def fitted_attention_shapes() -> dict[str, AttentionShape]:
    """Each kernel's :class:`AttentionShape`: defaults overlaid with ``data/attention_constants.json``
    (written by ``scripts/fit_attention.py``)."""
    path = data_path(ATTENTION_CONSTANTS_FILE)
    raw = json.loads(path.read_text()).get("shapes", {}) if path.exists() else {}
    known = {f.name for f in fields(AttentionShape)}
    return {k: AttentionShape(**{n: float(v) for n, v in raw.get(k, {}).items() if n in known}) for k in KERNELS}


@lru_cache(maxsize=1)
def fitted_attention_efficiency() -> dict[str, dict[str, float]]:
    """Per GPU family, the kernels' asymptotes the kernel benchmarks determine (ComputeConstants
    attention_efficiency / fa3_attention_efficiency), from ``data/attention_constants.json``."""
    path = data_path(ATTENTION_CONSTANTS_FILE)
    return json.loads(path.read_text()).get("per_gpu", {}) if path.exists() else {}
