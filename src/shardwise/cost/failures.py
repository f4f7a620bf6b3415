"""How often a synchronous training job is interrupted, and how long it takes to come back.

Failure model: each unit of the cluster (GPU, node, scale-out link) fails as a Poisson process at its
fleet's rate, and any failure stops the whole synchronous job, so the job's interruption rate is the sum
over units (a series system; Kokolis et al. 2025, "Revisiting Reliability in Large-Scale ML Research
Clusters", arXiv 2410.21680: MTTF = 1 / (N_nodes r_f)). The rates are the counts of a published fleet
over its units and days (``data/reliability.yaml``: Llama 3's Table 5 by default, or Meta's RSC-1/RSC-2).

Restart model: detection, relaunch (rescheduling, process start, initialisation), a rendezvous that
grows with the ranks (every rank registers with one store), then the checkpoint load. A failure that
takes a node out also needs a healthy node: a hot spare (none missing) or a wait for its repair.

Spares: failed nodes are in repair for ``repair`` seconds each, so the number in repair at any moment is
Poisson with mean rho = (swap failures per second) x repair (an M/G/inf queue; Palm's theorem). A failure
finds no spare when s or more nodes are already in repair, and the job waits (:func:`waits_by_spares`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.specs._loading import data_path, load_yaml

DAY_S = 86400.0


@lru_cache(maxsize=1)
def reliability_data() -> dict[str, Any]:
    """``data/reliability.yaml``: fleets, restart defaults and storage tiers, each with its source."""
    return load_yaml(data_path("reliability.yaml"))


def restart_default(key: str) -> float:
    """A restart default of ``data/reliability.yaml`` (detect_s, relaunch_s, rendezvous_s_per_rank, repair_h)."""
    return float(reliability_data()["restart"][key]["value"])


@dataclass(frozen=True)
class FailureRates:
    """Interruptions per unit and second; `swap_*` the share of each that needs a node replaced."""

    per_gpu_s: float
    per_node_s: float
    per_link_s: float
    planned_per_node_s: float
    swap_gpu: float = 1.0
    swap_node: float = 1.0
    swap_link: float = 1.0
    source: str = ""

    def per_job_s(self, gpus: int, nodes: int, links: int) -> float:
        """Unexpected interruptions per second of a job on these units (series system)."""
        return self.per_gpu_s * gpus + self.per_node_s * nodes + self.per_link_s * links

    def swap_per_job_s(self, gpus: int, nodes: int, links: int) -> float:
        """Unexpected interruptions per second that take a node out (a spare or a repair needed)."""
        return (self.per_gpu_s * self.swap_gpu * gpus + self.per_node_s * self.swap_node * nodes
                + self.per_link_s * self.swap_link * links)

    def planned_per_job_s(self, nodes: int) -> float:
        return self.planned_per_node_s * nodes


@lru_cache(maxsize=8)
def fleet_rates(name: str) -> FailureRates:
    """The rates of a published fleet: counts over units x days (module docstring)."""
    fleets = reliability_data()["fleets"]
    if name not in fleets:
        raise ShardwiseError(f"cluster.reliability.fleet: unknown fleet {name!r}; use one of {', '.join(fleets)}")
    f = fleets[name]
    if "per_node" in f:  # one rate per node-day for every failure (Kokolis et al.)
        rate = float(f["per_node"]) / DAY_S
        return FailureRates(0.0, rate, 0.0, 0.0, swap_node=float(f["swap_share"]), source=f["source"])
    units = {"gpu": f["gpus"], "node": f["gpus"] / f["gpus_per_node"], "link": f["gpus"] / f["gpus_per_node"] * f["links_per_node"]}
    count = {k: 0.0 for k in units}
    swap = {k: 0.0 for k in units}
    for c in f["categories"].values():
        count[c["per"]] += c["count"]
        swap[c["per"]] += c["count"] if c["swap"] else 0
    rate = {k: count[k] / (units[k] * f["days"] * DAY_S) for k in units}
    share = {k: swap[k] / count[k] if count[k] else 1.0 for k in units}
    return FailureRates(rate["gpu"], rate["node"], rate["link"], f["planned"] / (units["node"] * f["days"] * DAY_S),
                        share["gpu"], share["node"], share["link"], f["source"])


def scaled_rates(base: FailureRates, per_1k_gpu_days: float | None = None, per_1k_node_days: float | None = None,
                 per_1k_link_days: float | None = None, planned_per_1k_node_days: float | None = None) -> FailureRates:
    """`base` with the rates a user measured (interruptions per 1,000 unit-days) put in."""
    def rate(given: float | None, old: float) -> float:
        return old if given is None else given / 1000.0 / DAY_S
    return FailureRates(rate(per_1k_gpu_days, base.per_gpu_s), rate(per_1k_node_days, base.per_node_s),
                        rate(per_1k_link_days, base.per_link_s), rate(planned_per_1k_node_days, base.planned_per_node_s),
                        base.swap_gpu, base.swap_node, base.swap_link, base.source)


def rendezvous_s(ranks: int, per_rank_s: float) -> float:
    """Seconds for `ranks` ranks to register with the job's store (derived: linear in the ranks, the libuv
    TCPStore's 100 s at 98,304 ranks; data/reliability.yaml)."""
    return ranks * per_rank_s


def _poisson_pmf(rho: float, k: np.ndarray) -> np.ndarray:
    log_factorial = np.array([math.lgamma(x + 1.0) for x in k.tolist()])  # scipy.stats costs 0.6 s to import
    return np.exp(k * math.log(rho) - rho - log_factorial)


def wait_for_node_s(spares: int, rho: float, repair_s: float) -> float:
    """Mean wait for a healthy node after a swap failure with `spares` hot spares and a fixed repair time
    (derived): k nodes already in repair (Poisson(rho), PASTA) have residual repair times uniform on
    [0, repair] (M/D/inf), and the job restarts when k + 1 - s of them are back, the j-th of k uniform order
    statistics having mean j repair / (k + 1). No spares: the job waits for its own node."""
    if spares <= 0:
        return repair_s
    if rho <= 0:
        return 0.0
    k = np.arange(spares, max(spares, rho + 12.0 * math.sqrt(rho) + 30.0) + 1)  # the tail beyond: < 1e-12
    return float(np.sum(_poisson_pmf(rho, k) * (k + 1 - spares) / (k + 1))) * repair_s


def waits_by_spares(fail_s: float, swap_s: float, repair_s: float, other_down_s: float, counts: list[int]) -> np.ndarray:
    """Mean wait for a node per unexpected interruption, for each count of hot spares. Failures arrive only
    while the job is up, a share M / (M + D) of the wall clock in which repairs run, and D includes the
    wait: rho = swap rate x repair x M / (M + D), the fixed point found by secant steps (derived; the map
    decreases in the wait, so the point is unique). `fail_s`, `swap_s`: interruptions and node swaps per
    second of up time; `other_down_s`: the rest of D."""
    share = swap_s / fail_s if fail_s > 0 else 0.0
    waits = np.zeros(len(counts))
    if swap_s <= 0:
        return waits
    m = 1.0 / fail_s

    def excess(s: int, wait: float) -> float:  # F(wait) - wait
        rho = swap_s * repair_s * m / (m + other_down_s + wait)
        return share * wait_for_node_s(s, rho, repair_s) - wait

    for i, s in enumerate(counts):
        w0, f0 = 0.0, excess(s, 0.0)
        w1 = f0
        for _ in range(50):
            f1 = excess(s, w1)
            if abs(f1) <= 1e-6 * max(1.0, w1) or f1 == f0:
                break
            w0, w1, f0 = w1, max(0.0, w1 - f1 * (w1 - w0) / (f1 - f0)), f1
        waits[i] = w1
    return waits


def spare_candidates(rho: float) -> int:
    """Most spares worth considering: the Poisson(rho) count exceeded once in a million failures."""
    if rho <= 0:
        return 0
    k = np.arange(0.0, rho + 12.0 * math.sqrt(rho) + 30.0 + 1)  # the tail beyond: < 1e-12
    return int(k[min(np.searchsorted(np.cumsum(_poisson_pmf(rho, k)), 1 - 1e-6), len(k) - 1)]) + 1


def mttf_s(rate_s: float) -> float:
    """Mean time to failure of the job, seconds (inf without failures)."""
    return math.inf if rate_s <= 0 else 1.0 / rate_s
