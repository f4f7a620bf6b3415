"""Single-process reference run and the numerics check (needs torch).

The reference trains the same model (same seed) on the same data: per step one forward over the
whole global batch, mean cross-entropy, one backward, SGD with momentum. A correct parallel layout computes the
same loss and gradients up to floating-point reassociation (the correctness condition of data,
tensor and pipeline parallelism: the parallel program is the serial one with sums regrouped).

Relative difference of a tensor ``g`` against the reference ``r``: ``max|g - r| / max|r|`` (max-norm,
so parameters whose gradient is tiny do not blow up the figure). Tolerances are for fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from shardwise.execute.config import SGD, RunConfig
from shardwise.execute.model import build_model, lm_loss, synthetic_batch

#: fp32 tolerances of the check (max-norm relative difference, worst tensor). On the first step the
#: weights are identical, so gradients differ only by summation order: correct layouts measure
#: ~1e-7..1e-6. Later steps also carry the weight differences those made (SGD keeps them linear):
#: ~1e-6..1e-5 after a few steps. A wrong layout is off by >1e-2 at once.
LOSS_RTOL = 1e-5
GRAD_RTOL_FIRST = 1e-5
GRAD_RTOL = 1e-4


def reference_run(cfg: RunConfig) -> tuple[list[float], list[dict[str, torch.Tensor]]]:
    """Per step: the loss, and every gradient (before the optimizer step)."""
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, cfg.seed)
    opt = torch.optim.SGD(model.parameters(), foreach=False, **SGD)
    losses, grads = [], []
    for step in range(cfg.steps):
        x, y = synthetic_batch(cfg.model.vocab, cfg.global_batch, cfg.seq_len, cfg.seed, step)
        loss = lm_loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
        opt.zero_grad(set_to_none=True)
    return losses, grads


def rel_diff(a: torch.Tensor, ref: torch.Tensor) -> float:
    """``max|a - ref| / max|ref|`` (0 when both are all zero)."""
    scale = ref.abs().max().item()
    err = (a.float() - ref.float()).abs().max().item()
    return err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


@dataclass
class CheckResult:
    """Outcome of comparing a run with the reference."""

    passed: bool
    loss_max_rel_diff: float
    grad_first_step_max_rel_diff: float
    grad_max_rel_diff: float
    worst_grad: str
    worst_grad_step: int
    missing: list[str]
    per_param: dict[str, float]  # worst over steps

    def to_dict(self) -> dict:
        return {
            "passed": self.passed, "loss_max_rel_diff": self.loss_max_rel_diff,
            "grad_first_step_max_rel_diff": self.grad_first_step_max_rel_diff,
            "grad_max_rel_diff": self.grad_max_rel_diff, "worst_grad": self.worst_grad,
            "worst_grad_step": self.worst_grad_step, "missing_grads": self.missing,
            "loss_rtol": LOSS_RTOL, "grad_rtol_first_step": GRAD_RTOL_FIRST, "grad_rtol": GRAD_RTOL,
            "tolerance": "max-norm relative difference max|x - ref| / max|ref| per tensor, fp32",
            "per_param_max_rel_diff": self.per_param,
        }


def check(run_losses: list[float], run_grads: list[dict[str, torch.Tensor]], ref_losses: list[float],
          ref_grads: list[dict[str, torch.Tensor]]) -> CheckResult:
    """Compare per-step losses and gradients (gathered to full tensors) with the reference."""
    loss_d = max(abs(a - b) / abs(b) for a, b in zip(run_losses, ref_losses))
    per_param: dict[str, float] = {}
    worst, worst_step, worst_d, first_d = "", -1, 0.0, 0.0
    missing: set[str] = set()
    for step, (g, r) in enumerate(zip(run_grads, ref_grads)):
        for name, ref in r.items():
            if name not in g:
                missing.add(name)
                continue
            if tuple(g[name].shape) != tuple(ref.shape):
                d = float("inf")
            else:
                d = rel_diff(g[name], ref)
            per_param[name] = max(per_param.get(name, 0.0), d)
            if step == 0:
                first_d = max(first_d, d)
            if d > worst_d or not worst:
                worst, worst_step, worst_d = name, step, d
    passed = loss_d <= LOSS_RTOL and first_d <= GRAD_RTOL_FIRST and worst_d <= GRAD_RTOL and not missing
    return CheckResult(passed, loss_d, first_d, worst_d, worst, worst_step, sorted(missing), per_param)
