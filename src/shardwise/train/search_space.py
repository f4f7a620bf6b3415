"""The training plan space: every combination of the parallel degrees and knobs, as numpy arrays, with
the plans that cannot run removed and counted by reason.

Dimensions: tp (powers of two up to a node), pp (divisors of the GPU count), vpp (as each schedule
admits), cp (powers of two) with its scheme cp_comm (p2p, allgather, a2a, and a2a+p2p with each Ulysses
size u: 1 < u < cp, u dividing cp and the heads of a TP rank), and for MoE models ep
(powers of two up to the experts) and etp (expert tensor parallelism, powers of two up to tp),
folded over the tp*cp*dp ranks of a stage (Liu et al. 2025, MoE Parallel Folding), ZeRO 0-3, sequence
parallelism (only with tp > 1), recompute none/selective/full, micro-batch (powers of two), schedule,
for fp8/fp4 jobs whose recipe is auto the low-precision recipe (every FP8, or FP4, recipe), and for MoE
models, when asked, the token dispatcher (alltoall, allgather, deepep).
Plans that are the same plan under two names are not enumerated twice: sequence parallelism needs
tp > 1, with pp = 1 every schedule is plain gradient accumulation (kept once, as 1f1b), with
FlashAttention selective recompute has nothing left to recompute (kept once, as none), and without
cp the scheme is moot (kept once, as p2p).
A job's `parallel` fields are fixed axes of the search (FIXED_AXES); dp_shard, offload, flash_attention and
overlap_grad_reduce are the same for every plan (EVERY_PLAN) and only make some plans invalid.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.cost.layer import TP_OVERLAP_MODES
from shardwise.errors import ShardwiseError
from shardwise.limits import MAX_PIPELINE_STAGES
from shardwise.pipeline import resolve, schedule_info
from shardwise.pipeline.registry import planner_schedules
from shardwise.specs.hardware import Cluster
from shardwise.specs.layout import Layout
from shardwise.specs.model import ModelSpec
from shardwise.specs.plan_check import a2a_splits_heads
from shardwise.specs.training import FP4_RECIPES, FP8_RECIPES, RECIPE_ARCHS, Dispatcher, TrainingSpec, TrainPlan

if TYPE_CHECKING:
    from shardwise.engines.plan_view import PlanView

RECOMPUTE = ("none", "selective", "full")
#: the arrays a plan's :class:`~shardwise.specs.layout.Layout` is read from (:meth:`Candidates.layout`)
_LAYOUT_ARRAYS = ("tp", "cp", "ep", "etp", "dp", "pp", "vpp", "zero", "sp", "rc", "mb", "cpc", "uly")
#: context-parallel schemes the planner searches (a2a+p2p with each Ulysses size, the `uly` axis)
CP_COMMS = ("p2p", "allgather", "a2a", "a2a+p2p")
VPP_CHOICES = (1, 2, 3, 4, 6, 8)
FIELDS = ("tp", "pp", "vpp", "cp", "cpc", "uly", "ep", "etp", "zero", "sp", "rc", "mb", "sched", "rcp", "disp")
#: job-file plan fields a search takes as fixed axes (dp: kept where GPUs / (tp pp cp) equals it)
FIXED_AXES = ("tp", "pp", "vpp", "dp", "cp", "cp_comm", "ulysses", "ep", "etp", "zero", "sequence_parallel", "recompute",
              "micro_batch", "schedule", "tp_overlap")
#: job-file plan fields every searched plan carries as given (TrainPlan's other fields)
EVERY_PLAN = ("flash_attention", "overlap_grad_reduce", "dp_shard", "offload", "offload_device", "reshard_after_forward",
              "microbatch_group", "offload_activations", "offload_activations_policy")
assert set(FIXED_AXES) | set(EVERY_PLAN) == set(TrainPlan.model_fields), "a TrainPlan field the planner would ignore"
DISPATCHERS: tuple[str, ...] = Dispatcher.__args__

REASONS = {
    "heads": "tp does not divide the attention (or KV) heads",
    "gpus": "GPU count is not a multiple of tp*pp*cp",
    "layers": "more pipeline stages than layers",
    "stages_limit": f"more than {MAX_PIPELINE_STAGES} virtual stages (pp x vpp; Limits in the README)",
    "seq": "cp does not divide the sequence length",
    "experts": "ep does not divide the experts",
    "fold": "ep x etp does not divide the tp*cp*dp ranks of a stage (MoE Parallel Folding)",
    "etp_ffn": "etp does not divide the expert intermediate size",
    "cp_a2a": "cp_comm a2a needs heads divisible by cp (attention heads per TP rank)",
    "cp_ulysses": "cp_comm a2a+p2p needs the attention heads per TP rank divisible by the Ulysses size",
    "ulysses_cp": "the job's parallel.ulysses does not divide cp",
    "dp_fixed": "dp is not the job's parallel.dp (GPUs / (tp*pp*cp))",
    "dp_shard": "the job's parallel.dp_shard does not divide the data-parallel group dp*cp",
    "offload_zero": "the job's parallel.offload needs ZeRO (zero 1, 2 or 3)",
    "offload_nvme": "the job's parallel.offload_device nvme needs ZeRO-3",
    "batch_small": "micro-batch x dp exceeds the global batch",
    "batch_divide": "global batch is not a multiple of micro-batch x dp",
    "schedule": "schedule does not admit this (pp, micro-batches, vpp)",
    "dominated": "another etp / cp_comm (and Ulysses size) / recipe / dispatcher is no slower on every layer (the plan otherwise the same)",
    "tp_overlap": "the job's parallel.tp_overlap needs tp > 1 and sequence parallelism",
    "memory": "out of memory",
    "host_memory": "offloaded states exceed the node's host DRAM or NVMe",
    "memory_cap": "exceeds --max-memory-gib",
}


#: How rejections are told apart when reported (most telling first): plans that ran out of memory; plans
#: the job's own fields or --runnable-on / --max-memory-gib exclude; equivalent plans a faster one stands
#: for; and layouts that cannot exist for this GPU count, model and batch (divisibility: the largest count
#: and the least informative, so it comes last).
REJECTION_GROUPS = (
    ("out of memory", ("memory", "host_memory")),
    ("excluded by the job's fixed fields or the options", ("dp_fixed", "dp_shard", "offload_zero", "offload_nvme", "tp_overlap", "memory_cap")),
    ("no faster than an equivalent plan kept", ("dominated",)),
    ("cannot be laid out on this GPU count, model and batch (divisibility)",
     ("heads", "gpus", "layers", "stages_limit", "seq", "experts", "fold", "etp_ffn", "cp_a2a", "cp_ulysses", "ulysses_cp",
      "batch_small", "batch_divide", "schedule")),
)


def group_rejections(rejected: dict[str, int]) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """(group, plans, [(reason, plans), ...]) in REJECTION_GROUPS order; a reason no group names (an engine's
    or a recipe's refusal) joins the options' group."""
    group_of = {REASONS[k]: g for g, keys in REJECTION_GROUPS for k in keys}
    options = REJECTION_GROUPS[1][0]
    members: dict[str, list[tuple[str, int]]] = {g: [] for g, _ in REJECTION_GROUPS}
    for reason, n in sorted(rejected.items(), key=lambda kv: -kv[1]):
        if n:
            members[group_of.get(reason, options)].append((reason, n))
    return [(g, sum(n for _, n in m), m) for g, m in members.items() if m]


def _powers_of_two(limit: int) -> list[int]:
    out, x = [], 1
    while x <= limit:
        out.append(x)
        x *= 2
    return out


@dataclass
class Candidates:
    """Plans as parallel arrays (one element per plan); `schedules[sched]` names the schedule,
    `recipes[rcp]` the low-precision recipe ("none": 16-bit GEMMs), `dispatchers[disp]` the MoE token
    dispatcher (empty for a dense model), CP_COMMS[cpc] the CP scheme and `uly` the ranks of cp that
    exchange heads by all-to-all (TrainPlan.cp_a2a: cp for a2a, the Ulysses size for a2a+p2p, else 1)."""

    arrays: dict[str, np.ndarray]
    schedules: tuple[str, ...]
    considered: int
    rejected: Counter = field(default_factory=Counter)
    recipes: tuple[str, ...] = ("none",)
    dispatchers: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(next(iter(self.arrays.values())))

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def keep(self, mask: np.ndarray, reason: str | None = None) -> None:
        """Drop the plans where `mask` is false, counting them under `reason` (a key of REASONS or a line);
        a row with a `weight` counts as that many plans."""
        if mask.all():  # nothing to drop: no copy of the arrays
            return
        weight = self.arrays.get("weight")
        dropped = int((~mask).sum() if weight is None else weight[~mask].sum())
        if dropped and reason:
            self.rejected[REASONS.get(reason, reason)] += dropped
        self.arrays = {k: v[mask] for k, v in self.arrays.items()}

    def layout(self, rows: np.ndarray | None = None, dp_shard: int | None = None) -> Layout:
        """The rank layouts of the plans at `rows` (all plans: None), one array element per plan; `dp_shard`:
        the plans' TrainPlan field (None: shard over all of dp*cp)."""
        a = self.arrays if rows is None else {k: self.arrays[k][rows] for k in _LAYOUT_ARRAYS}
        return Layout(tp=a["tp"], cp=a["cp"], ep=a["ep"], etp=a["etp"], dp=a["dp"], pp=a["pp"], vpp=a["vpp"], zero=a["zero"],
                      sp=(a["sp"] == 1) & (a["tp"] > 1), recompute=np.asarray(RECOMPUTE)[a["rc"]], micro_batch=a["mb"],
                      cp_comm=np.asarray(CP_COMMS)[a["cpc"]], ulysses=a["uly"], dp_shard=dp_shard)

    def plan_dict(self, i: int) -> dict[str, Any]:
        """The plan's job-file fields; with a recipe search, also `fp8_recipe`, and for an MoE model
        `moe_dispatcher` (training fields)."""
        a = {k: int(v[i]) for k, v in self.arrays.items()}
        plan = {
            "tp": a["tp"], "pp": a["pp"], "vpp": a["vpp"], "cp": a["cp"], "cp_comm": CP_COMMS[a["cpc"]], "ep": a["ep"],
            "etp": a["etp"] if a["etp"] != a["tp"] else None, "dp": a["dp"], "zero": a["zero"],
            "sequence_parallel": bool(a["sp"]), "recompute": RECOMPUTE[a["rc"]], "micro_batch": a["mb"],
            "schedule": self.schedules[a["sched"]],
        }
        if "tpo" in a:  # the overlap mode the screen chose for the plan's layers (screen.layer_table)
            plan["tp_overlap"] = TP_OVERLAP_MODES[a["tpo"]]
        if plan["cp_comm"] == "a2a+p2p":
            plan["ulysses"] = a["uly"]
        if self.recipes != ("none",):
            plan["fp8_recipe"] = self.recipes[a["rcp"]]
        if self.dispatchers:
            plan["moe_dispatcher"] = self.dispatchers[a["disp"]]
        return plan


def searched_recipes(training: TrainingSpec, recipes: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The low-precision recipes a search tries: ("none",) for 16-bit jobs; the job's recipe when it
    names one; else `recipes` (checked against the precision) or every recipe of the precision."""
    if not training.low_precision:
        if recipes:
            raise ShardwiseError(f"--fp8-recipes: recipes need precision fp8 or fp4 (precision is {training.precision}); "
                                 "add --precision fp8")
        return ("none",)
    if training.fp8_recipe != "auto":
        if recipes and set(recipes) != {training.fp8_recipe}:
            raise ShardwiseError(f"--fp8-recipes: the job fixes training.fp8_recipe {training.fp8_recipe}; leave "
                                 "--fp8-recipes out, or set fp8_recipe: auto to search recipes")
        return (training.fp8_recipe,)
    allowed = FP4_RECIPES if training.precision == "fp4" else FP8_RECIPES
    bad = [r for r in recipes or () if r not in allowed]
    if bad:
        raise ShardwiseError(f"--fp8-recipes: {', '.join(bad)} is not a {training.precision} recipe; use some of "
                             f"{', '.join(allowed)}")
    return tuple(dict.fromkeys(recipes)) if recipes else allowed  # each once, in the order given


def searched_dispatchers(model: ModelSpec, training: TrainingSpec, dispatchers: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The MoE token dispatchers a search tries: none for a dense model; `dispatchers` when given, else the
    job's own (training.moe.dispatcher)."""
    if not model.is_moe:
        if dispatchers:
            raise ShardwiseError(f"--moe-dispatchers: {model.name} is dense (no experts to dispatch to); leave it out")
        return ()
    bad = [d for d in dispatchers or () if d not in DISPATCHERS]
    if bad:
        raise ShardwiseError(f"--moe-dispatchers: unknown dispatcher {', '.join(bad)}; use some of {', '.join(DISPATCHERS)}")
    return tuple(dict.fromkeys(dispatchers)) if dispatchers else (training.moe.dispatcher,)


def enumerate_plans(
    model: ModelSpec,
    cluster: Cluster,
    training: TrainingSpec,
    schedules: tuple[str, ...] | None = None,
    fixed: dict[str, Any] | None = None,
    max_tp: int | None = None,
    max_cp: int = 16,
    max_micro_batch: int = 8,
    flash_attention: bool = True,
    runnable_on: tuple[str, ...] = (),
    recipes: tuple[str, ...] | None = None,
    dispatchers: tuple[str, ...] | None = None,
    prune: Callable[[Candidates], None] | None = None,
) -> Candidates:
    """All distinct plans, minus those that cannot run (counted by reason); `schedules` defaults to those
    the planner searches by default (:func:`shardwise.pipeline.registry.planner_schedules`); `fixed` pins fields
    (job-file names: FIXED_AXES) and drops the plans that cannot run with the EVERY_PLAN fields it gives
    (dp_shard, offload); `runnable_on` keeps only the plans at least one of these engines runs as is; `recipes`
    limits the low-precision recipes of an fp8/fp4 job (:func:`searched_recipes`), `dispatchers` lists the
    MoE token dispatchers to try (:func:`searched_dispatchers`); `prune` drops more layouts (each row
    counted as the plans it stands for) before the knobs multiply them."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None and v != "auto"}
    unknown = sorted(set(fixed) - set(FIXED_AXES) - set(EVERY_PLAN))
    if unknown:
        raise ShardwiseError(f"parallel.{unknown[0]}: not a plan field; use some of {', '.join(FIXED_AXES + EVERY_PLAN)}")
    if "schedule" in fixed:
        schedules = (fixed["schedule"],)
    names = tuple(resolve(s) for s in (planner_schedules() if schedules is None else schedules))
    if not names:
        raise ShardwiseError("--schedules: give at least one schedule")
    n = cluster.num_gpus
    recipe_names = searched_recipes(training, recipes)
    if runnable_on and recipes is None and len(recipe_names) > 1:  # search only recipes one of the engines runs
        from shardwise.engines.table import runs_values

        ran = [runs_values("recipe", e) for e in runnable_on]
        recipe_names = tuple(r for r in recipe_names if any(x is None or r in x for x in ran)) or recipe_names
    dispatcher_names = searched_dispatchers(model, training, dispatchers)
    tps = _powers_of_two(max_tp or cluster.gpus_per_node)
    axes: dict[str, list[int]] = {
        "tp": tps,
        "pp": [d for d in range(1, min(n, model.layers + 2) + 1) if n % d == 0],
        "cp": _powers_of_two(min(max_cp, training.seq_len)),
        "cpc": list(range(len(CP_COMMS))),
        "ep": _powers_of_two(model.experts) if model.is_moe else [1],
        "etp": tps if model.is_moe else [0],  # up to tp (below); 0: as tp (a dense model has no experts to split)
        "zero": [0, 1, 2, 3],
        "sp": [0, 1],
        "rc": [0, 1, 2],
        "mb": _powers_of_two(max_micro_batch),
        "rcp": list(range(len(recipe_names))),
        "disp": list(range(max(1, len(dispatcher_names)))),
    }
    pins = {"tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "zero": "zero", "micro_batch": "mb"}
    for key, axis in pins.items():
        if key in fixed:
            axes[axis] = [int(fixed[key])]
    # The ranks of cp exchanging heads by all-to-all: the divisors of each cp (which go with which: _ulysses_distinct).
    axes["uly"] = sorted({d for cp in axes["cp"] for d in range(1, cp + 1) if cp % d == 0})
    if "etp" in fixed and model.is_moe:
        axes["etp"] = [int(fixed["etp"])]
    if "cp_comm" in fixed:
        if fixed["cp_comm"] not in CP_COMMS:
            raise ShardwiseError(f"parallel.cp_comm: {fixed['cp_comm']} is not a scheme; use one of {', '.join(CP_COMMS)}")
        axes["cpc"] = [CP_COMMS.index(fixed["cp_comm"])]
    if "ulysses" in fixed:
        if fixed.get("cp_comm") != "a2a+p2p":
            raise ShardwiseError(f"parallel.ulysses: only used with cp_comm a2a+p2p (cp_comm is {fixed.get('cp_comm', 'searched')}); "
                                 "add cp_comm: a2a+p2p or leave ulysses out")
        axes["uly"] = [int(fixed["ulysses"])]
    if fixed.get("tp_overlap", "none") not in TP_OVERLAP_MODES:
        raise ShardwiseError(f"parallel.tp_overlap: {fixed['tp_overlap']} is not a mode; use one of {', '.join(TP_OVERLAP_MODES)}")
    if "sequence_parallel" in fixed:
        axes["sp"] = [int(bool(fixed["sequence_parallel"]))]
    if "recompute" in fixed:
        axes["rc"] = [RECOMPUTE.index(fixed["recompute"])]
    pairs = [(si, v) for si, s in enumerate(names) for v in schedule_info(s).vpp_rule.options(VPP_CHOICES, model.layers)
             if "vpp" not in fixed or v == int(fixed["vpp"])]
    if not pairs:
        raise ShardwiseError(f"no schedule in {', '.join(names)} admits vpp={fixed.get('vpp')}")
    # Two levels: the layout (what fixes the groups, dp and the layer costs) and the knobs (ZeRO, SP,
    # recompute, micro-batch, schedule). Layouts that cannot run are dropped before the knobs multiply
    # them, counted with the number of distinct plans each stands for.
    layout_keys = ("tp", "pp", "cp", "cpc", "uly", "ep", "etp", "rcp", "disp")
    layout = _grid({k: axes[k] for k in layout_keys})
    if not model.is_moe:
        layout["etp"] = layout["tp"].copy()
    layout_distinct = (layout["cp"] > 1) | (layout["cpc"] == axes["cpc"][0])  # without cp the scheme is moot
    layout_distinct &= _ulysses_distinct(layout["cp"], layout["cpc"], layout["uly"], "ulysses" in fixed)
    if "etp" not in fixed:  # expert TP no wider than TP: folding narrows the experts' split (Liu et al. 2025 Sec. 3)
        layout_distinct &= layout["etp"] <= layout["tp"]
    layout = {k: v[layout_distinct] for k, v in layout.items()}
    knobs = _grid({k: axes[k] for k in ("zero", "sp", "rc", "mb")} | {"pair": list(range(len(pairs)))})
    pair = np.array(pairs, dtype=np.int64)
    knobs["sched"], knobs["vpp"] = pair[knobs["pair"], 0], pair[knobs["pair"], 1]
    del knobs["pair"]
    # The same plan under two names is enumerated once.
    distinct = np.ones(len(knobs["sp"]), dtype=bool)
    if flash_attention and "recompute" not in fixed:
        distinct &= knobs["rc"] != RECOMPUTE.index("selective")  # FlashAttention stores no s^2 terms to drop
    knobs = {k: v[distinct] for k, v in knobs.items()}
    single = names.index("1f1b") if "1f1b" in names else 0
    # Distinct knob rows by layout class (tp > 1, pp > 1): SP needs tp > 1, schedules need pp > 1.
    per_class = [np.nonzero(((knobs["sp"] == 0) | tp_split)
                            & (pipelined | ("schedule" in fixed) | ((knobs["sched"] == single) & (knobs["vpp"] == 1))))[0]
                 for tp_split in (False, True) for pipelined in (False, True)]
    layout["class"] = 2 * (layout["tp"] > 1) + (layout["pp"] > 1)
    layout["weight"] = np.array([len(k) for k in per_class], dtype=np.int64)[layout["class"]]
    cands = Candidates(layout, names, considered=int(layout["weight"].sum()), recipes=recipe_names, dispatchers=dispatcher_names)
    _drop_impossible_layouts(cands, model, cluster, training)
    if prune is not None:  # the caller's layout-level drops (e.g. dominated recipes), before the knobs multiply them
        prune(cands)
    if "dp" in fixed:
        cands.keep(cands["dp"] == int(fixed["dp"]), "dp_fixed")
    if "dp_shard" in fixed:
        cands.keep((cands["dp"] * cands["cp"]) % int(fixed["dp_shard"]) == 0, "dp_shard")
    # The knobs' rules depend on the layout through (pp, dp) only: check each knob row once per distinct
    # (pp, dp, class), counted for the layouts that share it, then expand the layouts with what is left.
    triples, triple_of = unique_rows([cands["pp"], cands["dp"], cands["class"]])
    sharing = np.bincount(triple_of, minlength=len(triples))
    rows = [per_class[k] for k in triples[:, 2].tolist()]
    sizes = np.array([len(r) for r in rows], dtype=np.int64)
    checks = Candidates({k: v[np.concatenate(rows)] if rows else v[:0] for k, v in knobs.items()}, names, 0, cands.rejected)
    checks.arrays |= {"pp": np.repeat(triples[:, 0], sizes), "dp": np.repeat(triples[:, 1], sizes),
                      "triple": np.repeat(np.arange(len(triples)), sizes), "weight": np.repeat(sharing, sizes)}
    _drop_impossible_knobs(checks, model, training)
    if fixed.get("offload", "none") != "none":
        checks.keep(checks["zero"] > 0, "offload_zero")
    if fixed.get("offload_device", "cpu") == "nvme":
        checks.keep(checks["zero"] == 3, "offload_nvme")
    left = np.bincount(checks["triple"], minlength=len(triples))
    first = np.cumsum(left) - left
    counts = left[triple_of]
    offsets = np.cumsum(counts) - counts
    pick = np.arange(int(counts.sum())) - np.repeat(offsets - first[triple_of], counts)  # each layout's knob rows
    arrays = {k: np.repeat(v, counts) for k, v in cands.arrays.items() if k not in ("class", "weight")}
    arrays |= {k: checks[k][pick] for k in (*knobs, "m")}
    cands.arrays = arrays
    if fixed.get("tp_overlap", "none") != "none":  # a fixed overlap mode splits the sequence-parallel collectives
        cands.keep((cands["tp"] > 1) & (cands["sp"] == 1), "tp_overlap")
    if runnable_on:
        keep_runnable(cands, runnable_on, model, training, flash_attention, fixed)
    return cands


def _ulysses_distinct(cp: np.ndarray, cpc: np.ndarray, uly: np.ndarray, pinned: bool) -> np.ndarray:
    """Which (cp, cp_comm, all-to-all ranks) rows are distinct plans: a2a exchanges over all of cp, p2p and
    allgather over none, a2a+p2p over a Ulysses group 1 < u < cp that divides cp (u = 1 is the ring and
    u = cp is a2a); a Ulysses size the job gives is kept as given (its validity is checked after)."""
    hybrid = cpc == CP_COMMS.index("a2a+p2p")
    searched = (uly > 1) & (uly < cp) & (cp % uly == 0)
    return np.where(hybrid, pinned | searched, uly == np.where(cpc == CP_COMMS.index("a2a"), cp, 1))


def unique_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows in lexicographic order, index of each input row's distinct row) of non-negative
    integer columns: ``np.unique(np.stack(columns, 1), axis=0, return_inverse=True)``, through one
    mixed-radix code per row and look-up tables instead of sorts (several times faster on millions of
    rows of small integers)."""
    code = np.zeros(len(columns[0]), dtype=np.int64)
    values = []
    for col in columns:
        vals, idx = _dense_codes(col)
        code = code * len(vals) + idx
        values.append(vals)
    codes, inv = _dense_codes(code)
    rows = np.empty((len(codes), len(columns)), dtype=np.int64)
    rest = codes.copy()
    for j in range(len(columns) - 1, -1, -1):
        rest, digit = np.divmod(rest, len(values[j]))
        rows[:, j] = values[j][digit]
    return rows, inv


def _dense_codes(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct values, each element's rank among them) of a non-negative integer array: a
    presence table when the values are small, else a sort."""
    if not len(col):
        return col[:0], col[:0]
    top = int(col.max())
    if top > 8 * len(col) + 1_000_000:
        vals, idx = np.unique(col, return_inverse=True)
        return vals, idx.ravel()
    present = np.zeros(top + 1, dtype=bool)
    present[col] = True
    rank = np.cumsum(present) - 1
    return np.nonzero(present)[0], rank[col]


def _grid(axes: dict[str, list[int]]) -> dict[str, np.ndarray]:
    """Every combination of the axes' values, in lexicographic order of the axes as given."""
    grids = np.meshgrid(*(np.array(v, dtype=np.int64) for v in axes.values()), indexing="ij")
    return {k: g.ravel() for k, g in zip(axes, grids, strict=True)}


def engine_view(c: Candidates, model: ModelSpec, training: TrainingSpec, flash_attention: bool = True,
                fixed: dict[str, Any] | None = None) -> PlanView:
    """The candidates as a :class:`~shardwise.engines.support.PlanView` (arrays, no copy); `fixed`: the
    job's plan fields every candidate carries (offload, dp_shard, reshard_after_forward, microbatch_group,
    tp_overlap)."""
    from shardwise.engines.plan_view import PlanView, training_knobs

    fixed = fixed or {}
    mode = fixed.get("tp_overlap", "auto")
    return PlanView(c["tp"], c["pp"], c["vpp"], c["cp"], c["ep"], c["dp"], c["zero"], c["sp"], c["rc"], c["sched"],
                    c.schedules, model, training.precision, flash_attention, training.method, etp=c["etp"],
                    cpc=c["cpc"], cp_comms=CP_COMMS, rcp=c["rcp"], recipes=c.recipes, disp=c["disp"],
                    dispatchers=c.dispatchers or ("alltoall",), tp_overlap="none" if mode == "auto" else mode,
                    microbatch_group=fixed.get("microbatch_group"), reshard_after_forward=fixed.get("reshard_after_forward"),
                    offload=fixed.get("offload", "none"), offload_device=fixed.get("offload_device", "cpu"),
                    dp_shard=fixed.get("dp_shard"), offload_activations=fixed.get("offload_activations", 0.0),
                    **training_knobs(training))


def keep_runnable(c: Candidates, engines: tuple[str, ...], model: ModelSpec, training: TrainingSpec,
                  flash_attention: bool = True, fixed: dict[str, Any] | None = None) -> None:
    """Drop the plans none of `engines` runs as is (the engine-rules table,
    :mod:`shardwise.engines.table`). With one engine each is counted under the reason of the engine's first
    rule it breaks; with several, under the engines' names."""
    from shardwise.engines.support import first_refusal
    from shardwise.engines.table import rules

    view = engine_view(c, model, training, flash_attention, fixed)
    results = {e: first_refusal(view, e) for e in engines}
    ok = np.zeros(len(c), dtype=bool)
    for _, good in results.values():
        ok |= good
    if len(engines) == 1:
        (engine, (which, _)), = results.items()
        for k, rule in enumerate(rules(engine)):
            n = int(((which == k) & ~ok).sum())
            if n:
                c.rejected[f"not runnable on {engine}: {rule.reason}"] += n
        c.arrays = {k: v[ok] for k, v in c.arrays.items()}
    else:
        c.keep(ok, f"runnable on none of {', '.join(engines)}")


def _drop_impossible_layouts(c: Candidates, model: ModelSpec, cluster: Cluster, training: TrainingSpec) -> None:
    """Drop the layouts that cannot run, by reason (the checks of :func:`shardwise.specs.job.check_plan`,
    vectorised); `c` holds layouts, each counted as the `weight` plans it stands for."""
    gpu = cluster.gpu
    for k, recipe in enumerate(c.recipes):
        if recipe == "none":
            continue
        precision, archs = ("fp4" if recipe in FP4_RECIPES else "fp8"), RECIPE_ARCHS.get(recipe)
        if precision not in gpu.tflops:
            c.keep(c["rcp"] != k, f"{precision} recipe {recipe} needs {precision} tensor cores ({gpu.name} has none)")
        elif archs and gpu.arch not in archs:
            c.keep(c["rcp"] != k, f"{precision} recipe {recipe} needs a {' or '.join(sorted(a.capitalize() for a in archs))} GPU")
    kv = model.n_kv_heads
    c.keep((model.heads % c["tp"] == 0) & ((kv % c["tp"] == 0) | (c["tp"] % kv == 0)), "heads")
    c.keep(cluster.num_gpus % (c["tp"] * c["pp"] * c["cp"]) == 0, "gpus")
    c.arrays["dp"] = cluster.num_gpus // (c["tp"] * c["pp"] * c["cp"])
    c.keep(c["pp"] <= model.layers + 2, "layers")
    c.keep(training.seq_len % c["cp"] == 0, "seq")
    hybrid = c["cpc"] == CP_COMMS.index("a2a+p2p")
    c.keep(~hybrid | (c["cp"] % c["uly"] == 0), "ulysses_cp")
    for scheme, reason in (("a2a", "cp_a2a"), ("a2a+p2p", "cp_ulysses")):  # uly: the ranks of cp exchanging heads
        c.keep(a2a_splits_heads(model.heads // c["tp"], c["uly"]) | (c["cpc"] != CP_COMMS.index(scheme)), reason)
    if model.is_moe:
        c.keep(model.experts % c["ep"] == 0, "experts")
        c.keep(model.d_expert % c["etp"] == 0, "etp_ffn")
        c.keep((c["tp"] * c["cp"] * c["dp"]) % (c["ep"] * c["etp"]) == 0, "fold")


def _drop_impossible_knobs(c: Candidates, model: ModelSpec, training: TrainingSpec) -> None:
    """Drop the knob rows (ZeRO, SP, recompute, micro-batch, schedule, vpp) that cannot run with their
    (pp, dp), by reason; adds the micro-batch count `m`."""
    c.keep(c["pp"] * c["vpp"] <= model.layers + 2, "layers")
    c.keep(c["pp"] * c["vpp"] <= MAX_PIPELINE_STAGES, "stages_limit")
    per_step = c["mb"] * c["dp"]
    c.keep(per_step <= training.global_batch, "batch_small")
    c.keep(training.global_batch % (c["mb"] * c["dp"]) == 0, "batch_divide")
    c.arrays["m"] = training.global_batch // (c["mb"] * c["dp"])
    ok = np.ones(len(c), dtype=bool)
    for si, name in enumerate(c.schedules):
        here = c["sched"] == si
        ok[here] = schedule_info(name).admits(c["pp"][here], c["m"][here], c["vpp"][here])
    ok &= np.where(c["pp"] > 1, c["m"] >= 1, True)
    c.keep(ok, "schedule")
