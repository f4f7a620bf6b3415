"""Fit and check the network model (:mod:`shardwise.cost.comm`) on public collective benchmarks.

Data: ``data/calibration/comm-measurements.json`` (a copy of ``shared/calibration``): nccl-tests,
rccl-tests and DeepEP records. Each usable record becomes a :class:`CommCase`: the cluster the source
ran on (:data:`SETUPS`: the catalog GPU and the node's NICs, from the record or the platform it names),
the group (n ranks, k per node), the collective, the message size and one metric:

- ``busbw``: nccl-tests bus bandwidth, GB/s = bus_factor(n) x S / t (NVIDIA/nccl-tests PERFORMANCE.md);
- ``bottleneck``: DeepEP normal kernels' bandwidth on the bottleneck link, NVLink inside a node and
  RDMA across nodes = bytes on that link / t;
- ``logical``: DeepEP V2's "logical bandwidth", all bytes a rank sends to the others / t.

Rows of at least 1 MiB (statements without a size: 4 GiB, the large-message regime they describe) are
fitted and scored; 8-byte rows are fitted too (they pin the LL protocol's latencies: an 8-byte
all-reduce is all latency) and reported apart (``latency_rows``).
DeepEP's low-latency kernels (per-token RDMA writes, not an NCCL-style collective) are skipped.

Fit: least squares on log(predicted / measured) with a soft-L1 loss (no record dominates), each constant
bounded. A constant no row depends on keeps its default and is reported as undetermined; an Ethernet
fabric without rows (EFA, GPUDirect-TCPXO) takes the other one's latency, RoCE always InfiniBand's. Cross-validation leaves one source
out at a time, fits the others from the defaults (never from the all-data fit: no leak) and scores the
held-out source. ``scripts/fit_network.py`` writes the all-data fit to ``data/network_constants.json``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from shardwise.cost.comm import bus_factor, collective_s
from shardwise.cost.constants import NetworkConstants, fitted_network_constants
from shardwise.errors import ShardwiseError
from shardwise.specs._loading import data_path, read_record_list
from shardwise.specs.hardware import Cluster, CommGroup, make_cluster

MIB = 2**20
STATEMENT_SIZE = 4 * 2**30  # rows that state a peak without a size: the large-message regime

# id prefix -> (catalog GPU, NICs per node, NIC Gbit/s, fabric, where the NIC figures come from).
# The first matching prefix wins; single-node rows never use their NICs.
SETUPS: list[tuple[str, str, int | None, float | None, str | None, str]] = [
    ("awsnccl_p4de", "A100-80GB", 4, 100, "efa", "p4de.24xlarge: 400 Gbps EFA as 4x 100 (record)"),
    ("awsnccl_p5", "H100-SXM", 32, 100, "efa", "p5.48xlarge: 3,200 Gbps EFA as 32x 100 (record)"),
    ("awsp5", "H100-SXM", 32, 100, "efa", "p5.48xlarge: 32 EFA v2 interfaces x 100 Gbps (record)"),
    ("gcpa3m", "H100-SXM", 8, 200, "tcpxo", "A3 Mega: 8x 200 Gbps GPUDirect-TCPXO (record)"),
    ("azndm", "A100-80GB", 8, 200, "infiniband", "NDm A100 v4: 8x 200 Gb/s HDR (record)"),
    ("nvstmt", "A100-80GB", 8, 200, "infiniband", "DGX A100: 8x 200 Gb/s IB (record); 4 nodes assumed"),
    ("stas_b200", "B200", 8, 400, "efa", "p6-b200.48xlarge: 8x 400 Gbps EFA (record)"),
    ("stas_h200", "H200", None, None, None, "single node"),
    ("stas_mi300x", "MI300X", None, None, None, "single node"),
    ("azbench_h100", "H100-SXM", None, None, None, "single node"),
    ("azbench_h200", "H200", None, None, None, "single node"),
    ("azbench_a100", "A100-80GB", None, None, None, "single node"),
    ("azbench_mi300x", "MI300X", None, None, None, "single node"),
    ("azbench_gb200", "GB200", None, None, None, "4 GPUs of one VM"),
    ("ncclissue212", "H100-SXM", None, None, None, "single node"),
    ("ncclissue1455", "H100-SXM", None, None, None, "single node"),
    ("ncclissue283", "H200", 8, 400, "infiniband", "8 HCAs per node (record); 400 Gb/s NDR assumed (record notes)"),
    ("ncclissue1374", "H800", None, None, None, "single node"),
    ("deepep", "H800", 8, 400, "infiniband", "one CX7 400 Gb/s InfiniBand NIC per GPU (record); SM90 rows taken as H800"),
]

SOURCE_LABELS = {
    "awsnccl": "AWS awsome-distributed-training nccl-tests (p4de, p5)",
    "awsp5": "AWS p5 nccl-tests, NCCL 2.27 (crazyguitar benchmark)",
    "gcpa3m": "GCP A3 Mega nccl-tests",
    "azndm": "Azure NDm A100 v4 nccl-tests (AKS blog)",
    "nvstmt": "NCCL developer statement, DGX A100",
    "stas": "stas00/ml-engineering benchmarks",
    "azbench": "Azure AI-benchmarking-guide",
    "ncclissue212": "nccl-tests issue #212 (NCCL developer)",
    "ncclissue1455": "NCCL issue #1455",
    "ncclissue283": "nccl-tests issue #283 (248 nodes)",
    "ncclissue1374": "NCCL issue #1374",
    "deepep": "DeepEP README (all-to-all)",
}

# Fitted constants: NetworkConstants field, unit scale (value = x * scale), lower and upper bound of x.
PARAMS: list[tuple[str, float, float, float]] = [
    ("ring_efficiency_nvlink", 1.0, 0.3, 1.0),
    ("ring_efficiency_xgmi", 1.0, 0.3, 1.0),
    ("nvls_efficiency", 1.0, 0.2, 1.2),
    ("tree_efficiency", 1.0, 0.05, 1.0),
    ("nic_efficiency", 1.0, 0.5, 1.0),
    ("link_latency_s", 1e-6, 0.0, 50.0),
    ("nic_latency_infiniband_s", 1e-6, 0.0, 500.0),
    ("nic_latency_efa_s", 1e-6, 0.0, 500.0),
    ("nic_latency_tcpxo_s", 1e-6, 0.0, 500.0),
    ("nvls_latency_s", 1e-6, 0.0, 60.0),  # at most ~2x the 25 us NCCL's tuner charges (tuning.cc)
    ("chunk_latency_s", 1e-6, 0.0, 200.0),
    ("ll_nic_latency_infiniband_s", 1e-6, 0.0, 500.0),
    ("ll_nic_latency_efa_s", 1e-6, 0.0, 500.0),
    ("ll_nic_latency_tcpxo_s", 1e-6, 0.0, 500.0),
    ("a2a_peer_latency_s", 1e-6, 0.0, 50.0),
]


@dataclass(frozen=True)
class CommCase:
    """One measured figure and what the model needs to predict it."""

    record_id: str
    source: str
    kind: str
    size_bytes: float
    n: int
    group: CommGroup
    metric: str
    measured: float
    assumptions: tuple[str, ...] = ()

    @property
    def system(self) -> str:
        g = self.group
        nodes = f"{g.domains}x{g.per_domain}" if g.domains > 1 else f"{g.per_domain} GPUs"
        return f"{self.record_id.split('_')[0]}: {self.group.network.link} {nodes}"

    def predict(self, constants: NetworkConstants | None = None) -> float:
        t = collective_s(self.kind, self.size_bytes, self.n, self.group, constants)
        g = self.group
        if self.metric == "busbw":
            return bus_factor(self.kind, self.n) * self.size_bytes / t / 1e9
        if self.metric == "time_us":
            return t * 1e6
        if self.metric == "logical":
            return self.size_bytes * (self.n - 1) / self.n / t / 1e9
        on_link = (g.per_domain - 1) if g.domains == 1 else (self.n - g.per_domain)  # "bottleneck"
        return self.size_bytes * on_link / self.n / t / 1e9


@dataclass(frozen=True)
class CommSkip:
    record_id: str
    reason: str


def default_data_path() -> Path:
    return data_path("calibration/comm-measurements.json")


def load_records(path: str | Path | None = None) -> list[dict[str, Any]]:
    return read_record_list(Path(path) if path else default_data_path())


def source_of(record_id: str) -> str:
    return record_id.split("_")[0]


def _cluster(record: dict[str, Any], assumptions: list[str]) -> tuple[Cluster, int]:
    rid, c = record["id"], record.get("cluster") or {}
    setup = next((s for s in SETUPS if rid.startswith(s[0])), None)
    if setup is None:
        raise ShardwiseError("no platform known for this record (add it to comm_fit.SETUPS)")
    _, gpu, nics, gbps, fabric, note = setup
    per_node = c.get("gpus_per_node") or 8
    n = c.get("n_gpus")
    if n is None:
        n = 4 * per_node
        assumptions.append("4 nodes (not stated)")
    gpus = n if n <= per_node else -(-n // per_node) * per_node
    network = {"nics_per_node": nics, "nic_gbps": gbps, "fabric": fabric} if nics else {}
    if n > per_node:
        assumptions.append(note)
    return make_cluster(gpu, gpus, per_node, network=network), int(n)


def _nvls_forced_off(record: dict[str, Any]) -> bool:
    m = record["measured"]
    text = " ".join(str(m.get(k, "")) for k in ("algo", "op")) + " " + record["id"]
    return m.get("nvls_enabled") is False or "NVLS_ENABLE=0" in text or "NCCL_ALGO=RING" in text or "nvlsoff" in text


def record_cases(record: dict[str, Any]) -> list[CommCase] | CommSkip:
    """The figures of one record, or why it is skipped."""
    rid, m = record["id"], record.get("measured") or {}
    op = str(m.get("op", "")).split()[0]
    assumptions: list[str] = []
    if op in ("moe_dispatch", "moe_combine"):
        if "time_us" in m and m.get("bottleneck_bw_gbyte_s") is None:
            return CommSkip(rid, "DeepEP low-latency kernels: per-token RDMA writes, not an NCCL-style all-to-all")
        kind, metric = "all_to_all", "logical" if "_v2_" in rid else "bottleneck"
        size = m["tokens_per_batch"] * m["top_k"] * m["hidden"] * (1 if op == "moe_dispatch" else 2)
        assumptions.append("dispatch FP8 (1 B per value, scales ignored), combine BF16")
        measured = m["bottleneck_bw_gbyte_s"]
    elif op in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "all_to_all"):
        # nccl-tests' alltoall: each rank sends S/n to every rank, busbw = S/t x (n-1)/n (PERFORMANCE.md)
        kind, metric = ("all_to_all" if op == "alltoall" else op), "busbw"
        size = m.get("message_bytes")
        if size is None:
            size = STATEMENT_SIZE
            assumptions.append("peak statement without a size: 4 GiB")
        measured = m.get("bus_bw_gbyte_s")
        if size < MIB:
            if not m.get("time_us"):
                return CommSkip(rid, "below 1 MiB without a time")
            metric, measured = "time_us", m["time_us"]
    else:
        return CommSkip(rid, f"collective {op!r} not modelled")
    if not measured:
        return CommSkip(rid, "no measured bandwidth")
    cluster, n = _cluster(record, assumptions)
    group = cluster.tier_for(n, 1)
    if _nvls_forced_off(record) and group.network.nvls:
        group = CommGroup(group.per_domain, group.domains, replace(group.network, nvls=False))
        assumptions.append("NVLS off (as run)")
    return [CommCase(rid, source_of(rid), kind, float(size), n, group, metric, float(measured), tuple(assumptions))]


def all_cases(records: list[dict[str, Any]]) -> tuple[list[CommCase], list[CommSkip]]:
    cases, skips = [], []
    for r in records:
        res = record_cases(r)
        (skips.append(res) if isinstance(res, CommSkip) else cases.extend(res))
    return cases, skips


def scored(cases: list[CommCase]) -> list[CommCase]:
    """The rows the model is fitted and judged on: bandwidth figures of at least 1 MiB."""
    return [c for c in cases if c.metric != "time_us"]


# --- fitting -----------------------------------------------------------------------------------------


def constants_from(x: np.ndarray, base: NetworkConstants | None = None) -> NetworkConstants:
    return replace(base or NetworkConstants(), **{name: float(v) * scale for (name, scale, *_), v in zip(PARAMS, x, strict=True)})


def _vector(c: NetworkConstants) -> np.ndarray:
    return np.array([getattr(c, name) / scale for name, scale, *_ in PARAMS])


def residuals(x: np.ndarray, cases: list[CommCase]) -> np.ndarray:
    c = constants_from(x)
    return np.array([math.log(case.predict(c) / case.measured) for case in cases])


def _sensitive(x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, cases: list[CommCase]) -> np.ndarray:
    """Which constants move any row's prediction at x0 (a small step towards the farther bound)."""
    r0 = residuals(x0, cases)
    out = []
    for i in range(len(x0)):
        x = x0.copy()
        x[i] += (hi[i] - lo[i]) * (1e-3 if hi[i] - x0[i] > x0[i] - lo[i] else -1e-3)
        out.append(bool(np.any(residuals(x, cases) != r0)))
    return np.array(out)


@dataclass
class NetworkFitResult:
    constants: NetworkConstants
    undetermined: tuple[str, ...]  # the rows do not move it (zero sensitivity)
    at_bound: tuple[str, ...]
    mean_abs_log_error: float


def fit(cases: list[CommCase], start: NetworkConstants | None = None) -> NetworkFitResult:
    """Least-squares fit of the PARAMS constants on `cases` (soft-L1 on log ratios), from `start`."""
    from scipy.optimize import least_squares

    lo, hi = np.array([p[2] for p in PARAMS]), np.array([p[3] for p in PARAMS])
    x0 = np.clip(_vector(start or NetworkConstants()), lo, hi)
    free = _sensitive(x0, lo, hi, cases)  # constants no row depends on keep their starting value
    idx = np.nonzero(free)[0]
    x = x0.copy()

    def fun(z: np.ndarray) -> np.ndarray:
        x[idx] = z
        return residuals(x, cases)

    if len(idx):
        res = least_squares(fun, x0[idx], bounds=(lo[idx], hi[idx]), loss="soft_l1", f_scale=0.1, x_scale=(hi - lo)[idx] / 4)
        x[idx] = res.x
    names = [p[0] for p in PARAMS]
    undetermined = tuple(n for n, f in zip(names, free, strict=True) if not f)
    bound = tuple(n for n, v, a, b, f in zip(names, x, lo, hi, free, strict=True) if f and min(v - a, b - v) <= 1e-6 * max(1.0, b - a))
    constants = constants_from(x)
    for prefix in ("", "ll_"):
        for fabric, twin in (("tcpxo", "efa"), ("efa", "tcpxo")):  # Ethernet fabrics without rows: the other's latency
            name, other = f"{prefix}nic_latency_{fabric}_s", f"{prefix}nic_latency_{twin}_s"
            if name in undetermined and other not in undetermined:
                constants = replace(constants, **{name: getattr(constants, other)})
    err = float(np.mean(np.abs(residuals(_vector(constants), cases))))
    return NetworkFitResult(constants, undetermined, bound, err)


def cross_validate(cases: list[CommCase]) -> dict[str, dict[str, Any]]:
    """Leave one source out: fit the others (every row, latency rows too) from the defaults, predict the
    held-out source's scored rows."""
    out = {}
    bandwidth = scored(cases)
    for source in sorted({c.source for c in bandwidth}):
        train = [c for c in cases if c.source != source]
        held = [c for c in bandwidth if c.source == source]
        res = fit(train)
        out[source] = {"fit": res, "rows": [(c, c.predict(res.constants)) for c in held]}
    return out


# --- reporting ---------------------------------------------------------------------------------------


def _stats(rows: list[tuple[CommCase, float]]) -> dict[str, Any]:
    errs = [p / c.measured - 1.0 for c, p in rows]
    return {"rows": len(errs), "mape": float(np.mean(np.abs(errs))) if errs else None,
            "max_abs": float(np.max(np.abs(errs))) if errs else None}


def run_validation(path: str | Path | None = None, constants: NetworkConstants | None = None, cv: bool = True) -> dict[str, Any]:
    """Per source: the error of the shipped constants and, with `cv`, the leave-one-source-out error."""
    constants = constants or fitted_network_constants()
    cases, skips = all_cases(load_records(path))
    bandwidth = scored(cases)
    insample = [(c, c.predict(constants)) for c in bandwidth]
    held = cross_validate(cases) if cv else {}
    per_source: dict[str, Any] = defaultdict(dict)
    for source in sorted({c.source for c in bandwidth}):
        mine = [(c, p) for c, p in insample if c.source == source]
        per_source[source] = {"label": SOURCE_LABELS.get(source, source), "shipped": _stats(mine)}
        if cv:
            fold = held[source]
            per_source[source]["held_out"] = _stats(fold["rows"])
            per_source[source]["undetermined_when_held_out"] = list(fold["fit"].undetermined)
    latency = [(c, c.predict(constants)) for c in cases if c.metric == "time_us"]
    return {"constants": constants, "per_source": dict(per_source), "rows": insample, "held_out": held,
            "latency_rows": latency, "skips": skips}


def to_json(result: dict[str, Any]) -> dict[str, Any]:
    def row(c: CommCase, p: float, held: float | None = None) -> dict[str, Any]:
        out = {"record": c.record_id, "source": c.source, "kind": c.kind, "size_bytes": c.size_bytes, "ranks": c.n,
               "per_node": c.group.per_domain, "nodes": c.group.domains, "metric": c.metric, "measured": c.measured,
               "predicted": p, "error": p / c.measured - 1.0, "assumptions": list(c.assumptions)}
        if held is not None:
            out |= {"predicted_held_out": held, "error_held_out": held / c.measured - 1.0}
        return out

    held = {c.record_id: p for fold in result["held_out"].values() for c, p in fold["rows"]}
    return {
        "per_source": result["per_source"],
        "rows": [row(c, p, held.get(c.record_id)) for c, p in result["rows"]],
        "latency_rows": [row(c, p) for c, p in result["latency_rows"]],
        "skipped": [{"record": s.record_id, "reason": s.reason} for s in result["skips"]],
    }


def constants_json(res: NetworkFitResult, cv: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The data file scripts/fit_network.py writes (read by cost.constants.fitted_network_constants)."""
    values = {f.name: getattr(res.constants, f.name) for f in fields(NetworkConstants)}
    out: dict[str, Any] = {
        "constants": values,
        "fit": {"script": "scripts/fit_network.py", "data": "calibration/comm-measurements.json",
                "fitted": [p[0] for p in PARAMS], "undetermined": list(res.undetermined), "at_bound": list(res.at_bound),
                "mean_abs_log_error": res.mean_abs_log_error},
    }
    if cv:
        out["fit"]["held_out_mape"] = {s: _stats(f["rows"])["mape"] for s, f in cv.items()}
    return out
