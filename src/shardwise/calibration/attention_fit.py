"""Fit and check the attention kernel model (:mod:`shardwise.cost.attention`) on kernel benchmarks.

Data: ``data/calibration/attention-kernels.yaml``: TFLOP/s of fused attention kernels per sequence length as
papers print them (FlashAttention-2 Figs. 5-7 on A100 and H100, FlashAttention-3 Figs. 5-6 on H100, ...), each with the
benchmark's setup (tokens per batch, hidden size = heads x head dim, FLOP convention). A record is predicted
by timing the kernel the benchmark ran (batch = tokens / seq_len, heads = hidden / head_dim) and dividing
the benchmark's FLOP count by it, so conventions cancel.

Fitted: per (GPU family, kernel class) the forward asymptote eta at head dim 128 (ComputeConstants
attention_efficiency, fa3_attention_efficiency, cudnn_attention_efficiency), and per kernel the tile-loop
overheads c0 (forward, backward), the backward/forward rate ratio and the head-dim factors at 64 and 256
(:class:`shardwise.cost.attention.AttentionShape`). Least squares on log(predicted / measured), soft-L1,
bounded; leave-one-source-out reports the error on each source from the others' fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from shardwise.cost.attention import KERNELS, AttentionShape, fused_attention_s
from shardwise.errors import ShardwiseError
from shardwise.specs._loading import data_path, load_yaml
from shardwise.specs.hardware import get_gpu

#: Kernel names in the data -> the kernel class whose constants time them ("standard" and "triton" are not modelled).
KERNEL_CLASS = {"fa2": "fa2", "fa3": "fa3", "cudnn": "cudnn"}
FAMILY = {"H100-SXM": "H100-SXM", "A100-80GB": "A100-80GB", "A100-40GB": "A100-80GB"}
SHAPE_BOUNDS = {"c0_fwd": (0.0, 16.0), "c0_bwd": (0.0, 16.0), "bwd_ratio": (0.3, 1.2), "d64": (0.3, 1.5), "d256": (0.3, 1.5)}
ETA_BOUNDS = (0.1, 0.95)
#: The benchmarks' FLOP count of a pass in units of the forward's 4 x seq^2 x head_dim x heads: the backward
#: 2.5x (FlashAttention-2 Sec. 4.1: 2 matmuls forward, 5 backward), both 3.5x (FlashAttention-2's Fig. 4 on
#: A100 equals 3.5 / (1/fwd + 2.5/bwd) of its Figs. 5 and 6 to the printed digit).
PASS_FLOPS = {"fwd": 1.0, "bwd": 2.5, "fwd_bwd": 3.5}
#: FlashAttention-2's paper does not say fp16 or bf16 (both run the same tensor-core rate).
DTYPES = ("bf16", "fp16", "fp16_or_bf16")
# A weak prior at the starting values, so constants no row depends on (a pass or head dim not benchmarked) stay.
PRIOR_WEIGHT = 0.05
ETA_PRIOR_WIDTH = 0.15
SHAPE_PRIOR_WIDTH = {"c0_fwd": 2.0, "c0_bwd": 2.0, "bwd_ratio": 0.15, "d64": 0.2, "d256": 0.2}


@dataclass(frozen=True)
class KernelCase:
    """One benchmark figure and the kernel call it measured."""

    source: str
    gpu: str  # catalog name
    kernel: str  # fa2 | fa3 | cudnn
    passes: str  # fwd | bwd | fwd_bwd (the time of both, as FlashAttention-2's Figs. 4 and 7 measure it)
    causal: bool
    head_dim: int
    seq_len: int
    bh: float  # batch x heads
    measured_tflops: float
    flops: float  # the benchmark's FLOP count of the call

    @property
    def family(self) -> str:
        return FAMILY.get(self.gpu, self.gpu)


def default_data_path() -> Path:
    return data_path("calibration/attention-kernels.yaml")


def load_cases(path: str | Path | None = None) -> list[KernelCase]:
    """The benchmark records the model covers (forward, backward or both of fa2 / fa3 / cuDNN kernels)."""
    doc = load_yaml(Path(path) if path else default_data_path())
    setups: dict[str, Any] = doc.get("setup", {})
    out = []
    for r in doc.get("records", []):
        kernel = KERNEL_CLASS.get(str(r["kernel"]).lower())
        if kernel is None or r["pass"] not in PASS_FLOPS or str(r.get("dtype", "bf16")) not in DTYPES:
            continue
        setup = setups[r["source"]]
        s, d = int(r["seq_len"]), int(r["head_dim"])
        batch = float(r.get("batch", setup["tokens_per_batch"] / s))
        heads = float(r.get("heads", setup["hidden"] / d))
        flops = 4.0 * batch * heads * s * s * d * (0.5 if r["causal"] else 1.0) * PASS_FLOPS[r["pass"]]
        out.append(KernelCase(r["source"], get_gpu(r["gpu"]).name, kernel, r["pass"], bool(r["causal"]), d, s,
                              batch * heads, float(r["tflops"]), flops))
    if not out:
        raise ShardwiseError("no attention kernel benchmarks to fit")
    return out


@dataclass
class AttentionFit:
    eta: dict[tuple[str, str], float]  # (family, kernel) -> forward asymptote at head dim 128
    shapes: dict[str, AttentionShape]

    def predict(self, c: KernelCase) -> float:
        """TFLOP/s the model gives the benchmark's call, in the benchmark's FLOP count."""
        gpu = get_gpu(c.gpu)
        t = sum(fused_attention_s(c.bh, c.seq_len, c.seq_len, c.head_dim, c.causal, backward, gpu.peak_flops("bf16"),
                                  self.eta[(c.family, c.kernel)], self.shapes[c.kernel], gpu.sms)
                for backward in {"fwd": (False,), "bwd": (True,), "fwd_bwd": (False, True)}[c.passes])
        return c.flops / t / 1e12


def _layout(cases: list[KernelCase]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    etas = sorted({(c.family, c.kernel) for c in cases})
    shape_fields = [f.name for f in fields(AttentionShape)]
    kernels = sorted({c.kernel for c in cases})
    return etas, [(k, f) for k in kernels for f in shape_fields]


def fit(cases: list[KernelCase], start: AttentionFit | None = None) -> AttentionFit:
    """Least squares of log(predicted / measured) over the cases (module docstring)."""
    etas, shape_keys = _layout(cases)
    base = start or AttentionFit({}, {k: AttentionShape() for k in KERNELS})
    x0 = [base.eta.get(e, 0.6) for e in etas] + [getattr(base.shapes[k], f) for k, f in shape_keys]
    lower = [ETA_BOUNDS[0]] * len(etas) + [SHAPE_BOUNDS[f][0] for _, f in shape_keys]
    upper = [ETA_BOUNDS[1]] * len(etas) + [SHAPE_BOUNDS[f][1] for _, f in shape_keys]

    def unpack(x: np.ndarray) -> AttentionFit:
        eta = dict(zip(etas, x[: len(etas)], strict=True))
        shapes = dict(base.shapes)
        for (k, f), v in zip(shape_keys, x[len(etas):], strict=True):
            shapes[k] = replace(shapes[k], **{f: float(v)})
        return AttentionFit({k: float(v) for k, v in eta.items()}, shapes)

    start_x = np.array(x0, dtype=float)
    width = np.array([ETA_PRIOR_WIDTH] * len(etas) + [SHAPE_PRIOR_WIDTH[f] for _, f in shape_keys])

    def residuals(x: np.ndarray) -> np.ndarray:
        model = unpack(x)
        data = [math.log(model.predict(c) / c.measured_tflops) for c in cases]
        return np.concatenate([data, PRIOR_WEIGHT * (x - start_x) / width])  # a weak prior: unseen constants stay

    x0 = np.clip(np.array(x0, dtype=float), lower, upper)
    res = least_squares(residuals, x0, bounds=(lower, upper), loss="soft_l1", f_scale=0.1)
    return unpack(res.x)


def errors(model: AttentionFit, cases: list[KernelCase]) -> list[tuple[KernelCase, float]]:
    """(case, predicted / measured - 1)."""
    return [(c, model.predict(c) / c.measured_tflops - 1.0) for c in cases]


def leave_one_source_out(cases: list[KernelCase]) -> dict[str, float]:
    """Per source: mean absolute error of its rows under the fit of the other sources' rows (rows whose GPU
    family and kernel no other source measures are predicted from the all-data fit's asymptote for them)."""
    full = fit(cases)
    out = {}
    for src in sorted({c.source for c in cases}):
        rest = [c for c in cases if c.source != src]
        held = [c for c in cases if c.source == src]
        if not rest:
            continue
        model = fit(rest, full)
        for key, v in full.eta.items():
            model.eta.setdefault(key, v)
        out[src] = float(np.mean([abs(e) for _, e in errors(model, held)]))
    return out
