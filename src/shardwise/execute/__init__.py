"""Execute a plan for real with torch.distributed, check its numerics, measure its timeline.

torch is an optional extra: nothing here imports it at module level. Public API::

    from shardwise.execute import config_from_job, run_plan
    cfg = config_from_job(job, nproc=2, steps=3, check=True)
    report = run_plan(cfg)          # dict: steps, memory, makespan, timeline, check, notes
"""

from __future__ import annotations

from pathlib import Path

from shardwise.execute.config import FAULTS, RunConfig, config_from_job
from shardwise.execute.torch_import import INSTALL_HINT, require_torch


def run_plan(cfg: RunConfig, workdir: Path | None = None) -> dict:
    """Run ``cfg`` on ``cfg.world_size`` processes; see :func:`shardwise.execute.run.run_plan`."""
    require_torch()
    from shardwise.execute.run import run_plan as _run

    return _run(cfg, workdir)


__all__ = ["FAULTS", "INSTALL_HINT", "RunConfig", "config_from_job", "require_torch", "run_plan"]
