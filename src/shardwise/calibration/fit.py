"""Fit the cost model's constants on the public measurements, with leave-one-source-out cross-validation.

The fitted parameters (:data:`PARAMS`) are physical constants of the device model (GEMM and attention
efficiency per GPU family, the fixed cost of a GEMM), of the software stacks (elementwise traffic of
eager and compiled PyTorch, communication overlap shares) and of the step (per-step overhead, straggler
jitter), of low-precision GEMMs (FP8/FP4 efficiency per family, recipe ratios) and of MoE layers (grouped
GEMMs, dispatch). Residuals are log(predicted / measured) of every throughput figure plus the
measured layer times of Korthikanti et al. 2022 Table 4; each row of a source group of n rows is weighted
1/sqrt(n + kappa), the random-effects weights of a meta-analysis (DerSimonian & Laird 1986): a source's
bias is one draw of a between-source spread tau, its rows add noise sigma, so a source weighs
n / (n + kappa) with kappa = sigma^2 / tau^2 (:data:`SOURCE_NOISE_RATIO`). No large source dominates,
and a source of one or two rows, whose bias its rows barely show, counts less than one that measured
many. The loss is robust (soft-L1, 10%), and a weak prior pulls each constant towards its cited starting
value (so constants the data do not pin stay where the literature puts them, and are reported as not
determined).

The fit runs in two stages (:func:`fit_in_stages`): the shared constants on the dense BF16/FP16 rows and
the layer times, then the constants only FP8/FP4 and MoE rows depend on, on those rows, with the shared
ones fixed. Fitted together, the large FP8/MoE misfits (unmodelled kernels, power-limited parts) pulled
shared constants such as the H100 attention efficiency and made dense held-out errors worse.

Cross-validation holds out one source group at a time (sources that share authors' setups or data form
one group: ``data/calibration_sources.yaml``), refits on the rest from the full fit, and predicts the
held-out group. Fitting the whole set again per group is what makes the error "on runs never seen".
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from shardwise.calibration.records import Case
from shardwise.calibration.scoring import row_class, signed_error
from shardwise.cost.attention import fitted_attention_efficiency
from shardwise.cost.constants import CITED_PER_GPU, Constants, fitted_data
from shardwise.cost.stack import host_overhead_stacks
from shardwise.specs.hardware import catalog_families

LOSS_SCALE = 0.10  # soft-L1 transition: a 10% log error
# kappa = sigma^2 / tau^2 of the module docstring, estimated by validate.source_spread (DerSimonian-Laird) on
# the dense leave-one-source-out residuals of the fit before this weighting: sigma 11.9%, tau 10.7%, kappa
# 1.24; `shardwise validate --cv` prints the estimate on the stored fit's residuals.
SOURCE_NOISE_RATIO = 1.25
PRIOR_WEIGHT = 0.1  # weight of the prior residual (theta - start) / width: weak, so the data decide where they can


@dataclass(frozen=True)
class Param:
    """One fitted constant: where it lives in Constants, its starting (cited or assumed) value, its
    physical bounds, the width of its prior, and which cases it can affect (for a fast Jacobian)."""

    name: str
    targets: tuple[str, ...]  # dotted paths, e.g. "per_gpu.H100-SXM.gemm_efficiency", "stacks.megatron.tp_comm_overlap"
    start: float
    lower: float
    upper: float
    width: float
    applies: Callable[[Case], bool]


def _any(_case: Case) -> bool:
    return True


def _family(name: str) -> Callable[[Case], bool]:
    return lambda c: c.tags.get("gpu_family") == name or c.category == "time" and name == "A100-80GB"


def _framework(*names: str) -> Callable[[Case], bool]:
    return lambda c: c.tags.get("framework") in names


def _fusion(kind: str) -> Callable[[Case], bool]:
    return lambda c: c.tags.get("fusion") == kind


FSDP_STACKS = ("fsdp", "torchtitan", "deepspeed", "maxtext", "megatron", "internevo")
LOW_PRECISION = ("fp8", "fp4")


def _lowp(family: str | None = None, recipes: tuple[str, ...] = (), precision: str | None = None) -> Callable[[Case], bool]:
    """Cases of FP8/FP4 runs (of a GPU family, recipes or precision when given)."""
    return lambda c: (c.tags.get("precision") in LOW_PRECISION and (family is None or c.tags.get("gpu_family") == family)
                      and (not recipes or c.tags.get("recipe") in recipes)
                      and (precision is None or c.tags.get("precision") == precision))


def _offload(case: Case) -> bool:
    return bool(case.tags.get("offload"))


def _moe(case: Case) -> bool:
    return bool(case.tags.get("moe"))


PARAMS: tuple[Param, ...] = (
    Param("A100 GEMM efficiency", ("per_gpu.A100-80GB.gemm_efficiency",), 0.70, 0.40, 0.95, 0.15, _family("A100-80GB")),
    Param("H100 GEMM efficiency", ("per_gpu.H100-SXM.gemm_efficiency",), 0.70, 0.40, 0.95, 0.15, _family("H100-SXM")),
    Param("B200 GEMM efficiency", ("per_gpu.B200.gemm_efficiency",), 0.70, 0.40, 0.95, 0.15, _family("B200")),
    Param("MI300X GEMM efficiency", ("per_gpu.MI300X.gemm_efficiency",), 0.55, 0.25, 0.95, 0.15, _family("MI300X")),
    Param("GEMM fixed cost (s)", ("compute.gemm_overhead_s",), 5e-6, 0.0, 40e-6, 10e-6, _any),
    Param("GEMM dimension offset d0 (elements)", ("compute.gemm_dim_offset",), 128.0, 0.0, 2048.0, 256.0, _any),
    Param("kernel launch gap (s)", ("compute.kernel_overhead_s",), 4e-6, 0.0, 30e-6, 5e-6, _any),
    # The attention kernels' asymptotes are fitted on kernel benchmarks (scripts/fit_attention.py: A100's FA2,
    # H100's FA2, FA3 and cuDNN), not here.
    Param("eager elementwise traffic", ("fusion.eager_traffic",), 2.5, 1.0, 6.0, 1.0, _fusion("eager")),
    Param("compiled elementwise traffic", ("fusion.compiled_traffic",), 1.2, 0.8, 3.0, 0.5, _fusion("compiled")),
    Param("Megatron TP overlap", ("stacks.megatron.tp_comm_overlap",), 0.5, 0.0, 1.0, 0.3, _framework("megatron")),
    Param("data-parallel overlap", tuple(f"stacks.{s}.dp_overlap" for s in FSDP_STACKS), 0.8, 0.0, 1.0, 0.3, _any),
    *(Param(f"{s} FSDP prefetch overlap", (f"stacks.{s}.fsdp_prefetch_overlap",), 0.8, 0.0, 1.0, 0.3, _framework(s))
      for s in ("fsdp", "torchtitan", "deepspeed", "maxtext")),
    Param("straggler jitter (cv)", ("step.straggler_cv",), 0.01, 0.0, 0.10, 0.02, _any),
    Param("per-step overhead (s)", ("step.step_overhead_s",), 0.02, 0.0, 0.5, 0.1, _framework(*host_overhead_stacks())),
    Param("host CPU Adam rate (B/s per node)", ("step.host_adam_bytes_s",), 40e9, 5e9, 200e9, 40e9, _offload),
    # Low precision (shardwise.cost.lowp): FP8 GEMM efficiency per family, FP4 on Blackwell, recipe ratios.
    Param("H100 FP8 GEMM efficiency", ("per_gpu.H100-SXM.fp8_gemm_efficiency",), 0.70, 0.25, 0.95, 0.15, _lowp("H100-SXM")),
    Param("B200 FP8 GEMM efficiency", ("per_gpu.B200.fp8_gemm_efficiency",), 0.70, 0.15, 0.95, 0.15, _lowp("B200", precision="fp8")),
    Param("MI300X FP8 GEMM efficiency", ("per_gpu.MI300X.fp8_gemm_efficiency",), 0.55, 0.15, 0.95, 0.15, _lowp("MI300X")),
    Param("B200 FP4 GEMM efficiency", ("per_gpu.B200.fp4_gemm_efficiency",), 0.70, 0.15, 0.95, 0.15, _lowp("B200", precision="fp4")),
    Param("row-wise / tensor-wise FP8 GEMM speed", ("lowp.rowwise_gemm_ratio",), 0.85, 0.4, 1.0, 0.15, _lowp(recipes=("rowwise",))),
    Param("MX block-scaled / tensor-wise GEMM speed", ("lowp.mx_gemm_ratio",), 1.0, 0.5, 1.2, 0.15, _lowp(recipes=("mxfp8", "mxfp4"))),
    # Mixture of experts (shardwise.cost.layer): grouped-GEMM speed, fixed cost of a dispatch.
    Param("MoE grouped-GEMM / dense GEMM speed", ("moe.grouped_gemm_ratio",), 1.0, 0.3, 1.6, 0.3, _moe),
    Param("MoE dispatch fixed cost (s)", ("moe.dispatch_overhead_s",), 50e-6, 0.0, 1e-3, 100e-6, _moe),
)


def base_constants(hbm: dict[str, float] | None = None) -> Constants:
    """The cited and assumed starting point of the training fit, with the device constants the serving
    runs determine (`hbm`: the serving fit's parameters, e.g. "A100-80GB.memory_efficiency"; default: the
    stored serving fit's)."""
    if hbm is None:
        hbm = fitted_data().get("serving", {}).get("fit", {}).get("parameters", {})
    per_gpu = {k: dict(v) for k, v in CITED_PER_GPU.items()}
    compute = {}
    for name, value in hbm.items():
        if name.startswith("device."):
            compute[name.split(".", 1)[1]] = value
        elif name.endswith(".memory_efficiency"):
            per_gpu.setdefault(name.split(".")[0], {})["memory_efficiency"] = value
    per_gpu = {k: {**v, **fitted_attention_efficiency().get(k, {})} for k, v in per_gpu.items()}
    for k, v in fitted_attention_efficiency().items():
        per_gpu.setdefault(k, dict(v))
    base = Constants(families=catalog_families(), per_gpu=per_gpu)
    return replace(base, compute=replace(base.compute, **compute)) if compute else base


def in_fit_scope(case: Case) -> bool:
    """Throughput figures (dense and MoE; BF16/FP16, FP8 and FP4) and measured layer times."""
    if case.category == "time":
        return True
    return case.category == "throughput" and case.tags.get("precision") in ("bf16", "fp16", *LOW_PRECISION)


def apply(constants: Constants, values: dict[str, float]) -> Constants:
    """`constants` with each named parameter's targets set to its value."""
    by_section: dict[str, dict[str, Any]] = defaultdict(dict)
    per_gpu = {k: dict(v) for k, v in constants.per_gpu.items()}
    stacks = {k: dict(v) for k, v in constants.stacks.items()}
    for p in PARAMS:
        if p.name not in values:
            continue
        for target in p.targets:
            section, *rest = target.split(".")
            if section == "per_gpu":
                per_gpu.setdefault(rest[0], {})[rest[1]] = values[p.name]
            elif section == "stacks":
                stacks.setdefault(rest[0], {})[rest[1]] = values[p.name]
            else:
                by_section[section][rest[0]] = values[p.name]
    kwargs: dict[str, Any] = {"per_gpu": per_gpu, "stacks": stacks}
    for section, fields in by_section.items():
        kwargs[section] = replace(getattr(constants, section), **fields)
    return replace(constants, **kwargs)


@dataclass
class FitResult:
    values: dict[str, float]
    cost: float
    determined: dict[str, str]  # parameter -> "determined" or why not
    stderr: dict[str, float]
    rows: int


class Problem:
    """Residuals of a set of cases as a function of the parameter vector."""

    def __init__(self, cases: list[Case], base: Constants, params: tuple[Param, ...] = PARAMS, prior_weight: float = PRIOR_WEIGHT):
        self.prior_weight = prior_weight
        self.cases = cases
        self.base = base
        self.params = params
        counts: dict[str, int] = defaultdict(int)
        for c in cases:
            counts[c.group] += 1
        self.weights = np.array([1.0 / math.sqrt(counts[c.group] + SOURCE_NOISE_RATIO) for c in cases])
        # Runs whose GPUs' speed their record leaves open (records.unknown_speed) share one unknown scale:
        # it is profiled out (each such group's mean log error subtracted), so they inform only ratios.
        labels: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(cases):
            if c.category == "throughput" and c.tags.get("unknown_speed"):
                labels[c.tags["unknown_speed"]].append(i)
        self.free_scale = [np.array(ix) for ix in labels.values()]
        self.affects = [self._whole_groups(np.array([p.applies(c) for c in cases])) for p in params]
        self.start = np.array([p.start for p in params])
        self.width = np.array([p.width for p in params])

    def constants(self, x: np.ndarray) -> Constants:
        return apply(self.base, {p.name: float(v) for p, v in zip(self.params, x, strict=True)})

    def _whole_groups(self, mask: np.ndarray) -> np.ndarray:
        """`mask` grown to every member of a free-scale group it touches (their residuals move together)."""
        for ix in self.free_scale:
            if mask[ix].any():
                mask[ix] = True
        return mask

    def log_errors(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        """log(predicted / measured) per case (where `mask`, which must hold whole free-scale groups), each
        free-scale group less its mean."""
        consts = self.constants(x)
        out = np.zeros(len(self.cases))
        for i, case in enumerate(self.cases):
            if mask is None or mask[i]:
                out[i] = math.log(max(case.predict(consts), 1e-12) / case.measured)
        for ix in self.free_scale:
            out[ix] -= out[ix].mean()
        return out

    def residuals(self, x: np.ndarray) -> np.ndarray:
        return np.concatenate([self.weights * self.log_errors(x), self.prior_weight * (x - self.start) / self.width])

    def cost(self, x: np.ndarray) -> float:
        """The objective least_squares minimises: 0.5 * f^2 * sum(rho((r / f)^2)), soft-L1
        rho(z) = 2 (sqrt(1 + z) - 1) (scipy.optimize.least_squares documentation)."""
        z = (self.residuals(x) / LOSS_SCALE) ** 2
        return float(0.5 * LOSS_SCALE**2 * np.sum(2.0 * (np.sqrt(1.0 + z) - 1.0)))

    def jacobian(self, x: np.ndarray) -> np.ndarray:
        """Forward differences, re-estimating only the cases each parameter can affect."""
        base = self.log_errors(x)
        jac = np.zeros((len(self.cases) + len(self.params), len(self.params)))
        for j, p in enumerate(self.params):
            step = 1e-3 * max(abs(x[j]), p.width)
            if x[j] + step > p.upper:
                step = -step
            xj = x.copy()
            xj[j] += step
            mask = self.affects[j]
            if mask.any():
                moved = self.log_errors(xj, mask)
                jac[: len(self.cases), j] = np.where(mask, self.weights * (moved - base) / step, 0.0)
            jac[len(self.cases) + j, j] = self.prior_weight / p.width
        return jac

    def fit(self, x0: np.ndarray | None = None, max_nfev: int = 30, assess: bool = True) -> FitResult:
        """Least squares from `x0` (default: the priors); `assess` adds what the data determine."""
        lower = np.array([p.lower for p in self.params])
        upper = np.array([p.upper for p in self.params])
        x0 = np.clip(self.start if x0 is None else x0, lower, upper)
        res = least_squares(self.residuals, x0, jac=self.jacobian, bounds=(lower, upper), loss="soft_l1",
                            f_scale=LOSS_SCALE, x_scale=self.width, max_nfev=max_nfev)
        determined, stderr = self.determinedness(res.x, self.jacobian(res.x), lower, upper) if assess else ({}, {})
        return FitResult(
            values={p.name: float(v) for p, v in zip(self.params, res.x, strict=True)},
            cost=self.cost(res.x),
            determined=determined,
            stderr=stderr,
            rows=len(self.cases),
        )

    def _posterior_sd(self, jac: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Gauss-Newton standard deviations with and without the data: (posterior, prior-only), from
        (J^T J)^-1 s^2 where J includes the prior rows and s^2 is the weighted residual variance."""
        n, k = len(self.cases), len(self.params)
        r = self.residuals(x)[:n]
        s2 = float(np.sum(r**2) / max(n - k, 1))
        post = np.sqrt(np.diag(np.linalg.inv(jac.T @ jac)) * s2)
        prior = self.width / self.prior_weight * math.sqrt(s2) if self.prior_weight else np.full(k, math.inf)
        return post, prior

    def determinedness(self, x: np.ndarray, jac: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> tuple[dict[str, str], dict[str, float]]:
        """A constant is determined by the data when some rows depend on it, it does not sit on a bound,
        and the data shrink its uncertainty to under half of what the prior alone allows."""
        post, prior = self._posterior_sd(jac, x)
        out = {}
        for j, p in enumerate(self.params):
            span = upper[j] - lower[j]
            if not self.affects[j].any():
                out[p.name] = "not determined: no fitted row depends on it (prior value kept)"
            elif min(x[j] - lower[j], upper[j] - x[j]) < 0.01 * span:
                out[p.name] = "not determined: sits on its bound"
            elif post[j] > 0.5 * prior[j]:
                out[p.name] = f"not determined: the data leave {post[j] / prior[j]:.0%} of the prior's uncertainty"
            else:
                out[p.name] = f"determined: standard error {post[j]:.3g}"
        return out, {p.name: float(v) for p, v in zip(self.params, post, strict=True)}


def pins_shared_constants(case: Case) -> bool:
    """Dense BF16/FP16 throughput rows and measured layer times: the rows the shared constants (GEMM,
    attention, elementwise, overlap, straggler) are fitted on. FP8/FP4 and MoE rows fit only the
    constants no dense row depends on, so a misfit of theirs cannot move a dense prediction."""
    return case.category == "time" or row_class(case.tags) == "dense"


def split_params(scoped: list[Case]) -> tuple[tuple[Param, ...], tuple[Param, ...]]:
    """(shared, specific): the parameters some dense row depends on, and the rest (FP8/FP4 GEMM
    efficiencies, recipe ratios, MoE constants)."""
    dense = [c for c in scoped if pins_shared_constants(c)]
    specific = tuple(p for p in PARAMS if not any(p.applies(c) for c in dense))
    return tuple(p for p in PARAMS if p not in specific), specific


def fit_in_stages(scoped: list[Case], base: Constants, x0: dict[str, float] | None = None, max_nfev: int = 30,
                  assess: bool = True, split: tuple[tuple[Param, ...], tuple[Param, ...]] | None = None) -> FitResult:
    """Two least-squares stages: the shared parameters on the dense rows, then the FP8/MoE-specific
    ones on the other rows with the shared ones fixed. The reported objective is the full one over
    every in-scope case (what :class:`Problem` computes with all parameters)."""
    shared, specific = split or split_params(scoped)
    values: dict[str, float] = {}
    determined: dict[str, str] = {}
    stderr: dict[str, float] = {}
    stage_base = base
    for params, rows in ((shared, [c for c in scoped if pins_shared_constants(c)]),
                         (specific, [c for c in scoped if not pins_shared_constants(c)])):
        if not params:
            continue
        if not rows:  # nothing to fit them on: kept where they start
            values.update({p.name: (x0 or {}).get(p.name, p.start) for p in params})
            determined.update({p.name: "not determined: no fitted row depends on it (prior value kept)" for p in params})
            continue
        start = None if x0 is None else np.array([x0[p.name] for p in params])
        res = Problem(rows, stage_base, params).fit(start, max_nfev, assess)
        values.update(res.values)
        determined.update(res.determined)
        stderr.update(res.stderr)
        stage_base = apply(stage_base, res.values)
    ordered = {p.name: values[p.name] for p in PARAMS}
    cost = Problem(scoped, base).cost(np.array(list(ordered.values())))
    return FitResult(ordered, cost, {p.name: determined[p.name] for p in PARAMS if p.name in determined},
                     stderr, len(scoped))


def fit_cases(cases: list[Case], base: Constants, max_nfev: int = 30) -> tuple[FitResult, Constants]:
    result = fit_in_stages([c for c in cases if in_fit_scope(c)], base, None, max_nfev)
    return result, apply(base, result.values)


def fit_new_params(cases: list[Case], base: Constants, stored: dict[str, float], max_nfev: int = 30) -> tuple[FitResult, Constants]:
    """Fit only the parameters a stored fit lacks, the others fixed at their `stored` values, on the
    in-scope cases the new ones affect (fast: the rest of the model is not refitted). The result's
    objective is the full one over every in-scope case, as :func:`fit_cases` reports it."""
    fixed = {p.name: stored[p.name] for p in PARAMS if p.name in stored}
    free = tuple(p for p in PARAMS if p.name not in stored)
    scoped = [c for c in cases if in_fit_scope(c)]
    touched = [c for c in scoped if any(p.applies(c) for p in free)]
    result = Problem(touched, apply(base, fixed), free).fit(None, max_nfev)
    values = {**fixed, **result.values}
    cost = Problem(scoped, base).cost(np.array([values[p.name] for p in PARAMS]))
    determined = {**{n: "fixed at the stored fit" for n in fixed}, **result.determined}
    return FitResult(values, cost, determined, result.stderr, len(scoped)), apply(base, values)


def held_out_rows(cases: list[Case], group: str, consts: Constants) -> list[dict[str, Any]]:
    """Predictions of a group's throughput cases with the constants fitted without it."""
    return [
        {"id": c.record_id, "source": c.source, "metric": c.metric, "measured": c.measured,
         "predicted": (pred := c.predict(consts)), "error": signed_error(c.metric, c.measured, pred),
         "in_scope": in_fit_scope(c), "tags": c.tags}
        for c in cases if c.group == group and c.category == "throughput"
    ]


_FOLD_INPUTS: tuple[Any, ...] = ()  # (cases, base, full, max_nfev) inherited by forked fold workers


def _fold(group: str) -> tuple[str, dict[str, Any]]:
    """One leave-one-group-out fold: refit without `group` (from the full fit) and predict it."""
    cases, base, full, max_nfev = _FOLD_INPUTS
    scoped = [c for c in cases if in_fit_scope(c)]
    train = [c for c in scoped if c.group != group]
    split = split_params(scoped)  # the full data's split, so every fold fits the same parameters per stage
    res = fit_in_stages(train, base, full.values, max_nfev, assess=False, split=split) if len(train) < len(scoped) else full
    return group, {"values": res.values, "rows": held_out_rows(cases, group, apply(base, res.values))}


def leave_one_group_out(cases: list[Case], base: Constants, full: FitResult, progress: Callable[[str], None] | None = None,
                        max_nfev: int = 6, jobs: int = 1) -> dict[str, dict[str, Any]]:
    """For each source group with throughput rows: refit without it (from the full fit) and predict it.
    Returns group -> {"values": the fold's constants, "rows": held-out rows (id, metric, measured,
    predicted, error, tags)}. `jobs` > 1 runs the folds in that many forked processes (the cases hold
    closures, so the workers inherit them rather than receive them)."""
    global _FOLD_INPUTS
    groups = sorted({c.group for c in cases if c.category == "throughput"})
    _FOLD_INPUTS = (cases, base, full, max_nfev)
    try:
        if jobs <= 1:
            done = []
            for g in groups:
                if progress:
                    progress(g)
                done.append(_fold(g))
        else:
            import multiprocessing

            with multiprocessing.get_context("fork").Pool(jobs) as pool:
                done = []
                for g, fold in pool.imap_unordered(_fold, groups):
                    if progress:
                        progress(g)
                    done.append((g, fold))
    finally:
        _FOLD_INPUTS = ()
    return dict(sorted(done))
