"""One executor process: join the process group, lay out the plan, run the steps, write the results.

Every rank builds the full model from the same seed (so every layout starts from identical weights),
keeps its part (pipeline stages), parallelises it (:mod:`.layout`), then per step: forward/backward
(:mod:`.runners`), ZeRO-0/1 gradient all-reduce over DP, optional gather of every gradient to a full
tensor (``--check``), optimizer step. Results go to ``<workdir>/rank<r>.pt``; a failure writes the
traceback to ``<workdir>/rank<r>.err`` and exits non-zero so the launcher can stop the others.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from shardwise.execute.config import RunConfig

if TYPE_CHECKING:
    import torch
    from torch.distributed.device_mesh import DeviceMesh


def _p2p_probe_s(cfg: RunConfig, mesh: DeviceMesh, device: torch.device, rounds: int = 50) -> float | None:
    """Half the median round trip of one activation-sized message between pipeline ranks 0 and 1."""
    import torch
    import torch.distributed as dist

    if cfg.pp < 2:
        return None
    pp_rank = mesh["pp"].get_local_rank()
    peers = mesh["pp"].mesh.tolist()
    buf = torch.zeros(cfg.micro_batch, cfg.seq_len, cfg.model.hidden, device=device)
    times = []
    for _ in range(rounds):
        if pp_rank == 0:
            t0 = time.perf_counter()
            dist.send(buf, dst=peers[1])
            dist.recv(buf, src=peers[1])
            times.append((time.perf_counter() - t0) / 2)
        elif pp_rank == 1:
            dist.recv(buf, src=peers[0])
            dist.send(buf, dst=peers[0])
    return statistics.median(times) if times else None


def _run(rank: int, cfg: RunConfig, port: int, workdir: Path) -> dict:
    import torch
    import torch.distributed as dist

    from shardwise.execute.layout import allreduce_grads, full_grads, make_mesh, make_optimizer, state_bytes
    from shardwise.execute.model import build_model, synthetic_batch
    from shardwise.execute.record import Recorder
    from shardwise.execute.runners import FlatRunner, PipelineRunner, named_params

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = cfg.backend == "nccl"
    device = torch.device(f"cuda:{rank % max(torch.cuda.device_count(), 1)}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(cfg.backend, rank=rank, world_size=cfg.world_size,
                            timeout=timedelta(seconds=cfg.timeout_s))
    mesh = make_mesh(cfg, device.type)
    pp_r, dp_r, tp_r = cfg.coords(rank)
    rec = Recorder(sync=torch.cuda.synchronize if cuda else None)
    full = build_model(cfg.model, cfg.seed).to(device)
    if cfg.pp > 1:
        from shardwise.pipeline import load_csv

        sched = load_csv(workdir / "schedule.csv", name=cfg.schedule, microbatches=cfg.microbatches)
        runner = PipelineRunner(cfg, full, mesh, rec, sched, workdir / "schedule.csv", device)
    else:
        runner = FlatRunner(cfg, full, mesh, rec)
    params = named_params(runner.modules)
    plist = [p for _, p in params]
    dp_group = mesh["dp"].get_group()
    opt = make_optimizer(plist, cfg, dp_group)
    sync_dp = cfg.dp > 1 and cfg.zero < 2 and cfg.fault != "skip-dp-grad-reduce"
    rows = cfg.rows(dp_r)

    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = synthetic_batch(cfg.model.vocab, cfg.global_batch, cfg.seq_len, cfg.seed, step)
        return x[rows].to(device), y[rows].to(device)

    out: dict = {"rank": rank, "coords": (pp_r, dp_r, tp_r), "schedule_source": runner.schedule_source,
                 "reports_loss": runner.has_loss and tp_r == 0, "reports_grads": dp_r == 0 and tp_r == 0,
                 "steps": [], "timeline": [], "grads": [], "calibration": None}
    if cfg.calibrate:  # forward/backward only; gradients dropped, weights unchanged
        x, y = batch(-1)
        calib = []
        for _ in range(cfg.calib_steps):
            dist.barrier()
            runner.step(x, y)
            calib.append(rec.take())
            for p in plist:
                p.grad = None
        # the first pass is a warm-up
        out["calibration"] = {"rows": calib[1:] or calib, "p2p_s": _p2p_probe_s(cfg, mesh, device)}
    for step in range(cfg.steps):
        x, y = batch(step)
        dist.barrier()
        if cfg.fault == "crash-last-rank" and rank == cfg.world_size - 1:
            raise RuntimeError(f"injected fault: rank {rank} crashed in step {step}")
        t0 = time.perf_counter()
        loss = runner.step(x, y)
        if sync_dp:
            with rec.comm("DP_ALLREDUCE"):
                allreduce_grads(plist, dp_group, cfg.dp)
        t1 = time.perf_counter()
        if cfg.check:
            grads = full_grads(params)  # collective over TP/FSDP meshes: every rank takes part
            out["grads"].append(grads if out["reports_grads"] else None)
        t2 = time.perf_counter()
        opt.step()
        for p in plist:
            p.grad = None
        if cuda:
            torch.cuda.synchronize()
        t3 = time.perf_counter()
        out["steps"].append({"loss": loss if out["reports_loss"] else None, "start": t0,
                             "end_backward": t1, "end": t1 + (t3 - t2)})
        out["timeline"].append(rec.take())
    for p in plist:  # state bytes with gradients present, as during the step
        p.grad = torch.zeros_like(p)
    out["state_bytes"] = state_bytes(plist, opt)
    out["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out["cuda_peak_bytes"] = torch.cuda.max_memory_allocated(device) if cuda else None
    dist.barrier()
    dist.destroy_process_group()
    return out


def run_worker(rank: int, cfg: RunConfig, port: int, workdir: str) -> None:
    """Process entry point (must stay importable for the ``spawn``/``forkserver`` start methods)."""
    wd = Path(workdir)
    try:
        import torch

        result = _run(rank, cfg, port, wd)
        torch.save(result, wd / f"rank{rank}.pt")
    except BaseException as exc:  # noqa: BLE001 - report any failure to the launcher, then die
        from shardwise.errors import ShardwiseError

        text = str(exc) if isinstance(exc, ShardwiseError) else traceback.format_exc()
        (wd / f"rank{rank}.err").write_text(f"{time.time()!r}\n{text}")  # when, so the first failure is found
        os._exit(1)
