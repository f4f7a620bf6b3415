"""Prompt and output length distributions.

`sharegpt` is a built-in stand-in for the ShareGPT V3 conversations as `vllm bench serve` and
`sglang.bench_serving` sample them (first human turn -> prompt, first reply -> output; pairs with
prompt < 4 or output < 4 tokens, prompt > 1024 or prompt + output > 2048 dropped; see
vllm/benchmarks/datasets.py::ShareGPTDataset). Published runs with the Llama-3 tokenizer report
229,711 input / 203,068 output tokens for 1,000 prompts (vllm-project/vllm PR #18566) and 4,132.37 /
21.27 = 194 output tokens per request for 5,000 prompts (sgl-project/sglang
benchmark/benchmark_vllm_060). Two truncated log-normals with those means stand in for the data set; their
spread (sigma) is an assumption, so medians and tails are approximate (docs/serving.md).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_SEQUENCE_TOKENS

# Log-normal (median, sigma) of the ShareGPT stand-in; the medians are chosen so the filtered means
# are ~230 input and ~200 output tokens (tests/serve/test_workload.py checks the means).
SHAREGPT_INPUT = (170.0, 1.20)
SHAREGPT_OUTPUT = (118.0, 1.10)
SHAREGPT_MAX_INPUT = 1024
SHAREGPT_MAX_TOTAL = 2048
SHAREGPT_MIN = 4


class LengthSpec(BaseModel):
    """A number of tokens (`value`), or a distribution."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    dist: Literal["fixed", "uniform", "sharegpt", "lognormal", "trace"] = Field(default="fixed", description="fixed "
        "(value), uniform (min..max), sharegpt (the built-in ShareGPT stand-in), lognormal (median, sigma, "
        "optional max), trace (the trace's own lengths)")
    value: int | None = Field(default=None, ge=1, le=MAX_SEQUENCE_TOKENS, description="fixed: tokens")
    min: int | None = Field(default=None, ge=1, le=MAX_SEQUENCE_TOKENS, description="uniform: fewest tokens")
    max: int | None = Field(default=None, ge=1, le=MAX_SEQUENCE_TOKENS, description="uniform: most tokens; lognormal: cap")
    median: float | None = Field(default=None, gt=0, le=MAX_SEQUENCE_TOKENS, description="lognormal: median tokens")
    sigma: float | None = Field(default=None, ge=0, le=10, description="lognormal: sigma of log(tokens)")

    @model_validator(mode="after")
    def _check(self) -> LengthSpec:
        if self.dist == "fixed" and self.value is None:
            raise ValueError("a fixed length needs value (tokens), e.g. input_len: 512")
        if self.dist == "uniform":
            if self.min is None or self.max is None:
                raise ValueError("{dist: uniform} needs min and max (tokens)")
            if self.min > self.max:
                raise ValueError(f"uniform min ({self.min}) must be <= max ({self.max})")
        if self.dist == "lognormal" and (self.median is None or self.sigma is None):
            raise ValueError("{dist: lognormal} needs median (tokens) and sigma")
        return self


def describe_lengths(spec: LengthSpec) -> str:
    """How a length was drawn, for the report: 'trace', 'sharegpt', 'fixed 512', 'uniform 512-2048', ..."""
    if spec.dist == "fixed":
        return f"fixed {spec.value}"
    if spec.dist == "uniform":
        return f"uniform {spec.min}-{spec.max}"
    if spec.dist == "lognormal":
        return f"lognormal median {spec.median:g} sigma {spec.sigma:g}" + (f" max {spec.max}" if spec.max else "")
    return spec.dist


def _lognormal(median: float, sigma: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Log-normal token counts, rounded and kept within 1..MAX_SEQUENCE_TOKENS (no int64 overflow)."""
    return np.clip(np.rint(rng.lognormal(np.log(median), sigma, n)), 1, MAX_SEQUENCE_TOKENS).astype(np.int64)


def sample_lengths(spec: LengthSpec, n: int, rng: np.random.Generator, what: str = "length") -> np.ndarray:
    """`n` lengths drawn from `spec` (ShareGPT marginals when drawn alone)."""
    if spec.dist == "fixed":
        return np.full(n, int(spec.value or 1), dtype=np.int64)
    if spec.dist == "uniform":
        return rng.integers(int(spec.min or 1), int(spec.max or 1) + 1, n).astype(np.int64)
    if spec.dist == "lognormal":
        out = _lognormal(float(spec.median or 1), float(spec.sigma or 0), n, rng)
        return np.minimum(out, spec.max) if spec.max else out
    if spec.dist == "sharegpt":
        inp, out = sharegpt_pairs(n, rng)
        return inp if what == "input" else out
    raise ShardwiseError(f"{what}_len: {{dist: trace}} needs arrival: trace with a path")


def sharegpt_pairs(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """`n` (prompt, output) pairs from the ShareGPT stand-in, with the benchmark's filter applied."""
    inputs: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    have = 0
    while have < n:
        m = max(64, 2 * (n - have))
        inp = _lognormal(*SHAREGPT_INPUT, m, rng)
        out = _lognormal(*SHAREGPT_OUTPUT, m, rng)
        keep = (inp >= SHAREGPT_MIN) & (out >= SHAREGPT_MIN) & (inp <= SHAREGPT_MAX_INPUT) & (inp + out <= SHAREGPT_MAX_TOTAL)
        inputs.append(inp[keep])
        outputs.append(out[keep])
        have += int(keep.sum())
    return np.concatenate(inputs)[:n], np.concatenate(outputs)[:n]
