"""Parse and validate an exported Megatron-LM command with Megatron-LM's own parser (needs a source
checkout and torch; Megatron asks for Python >= 3.12, 3.11 works with ``typing.override`` supplied).

    python scripts/megatron_check.py /path/to/Megatron-LM job.yaml     # prints what Megatron sees
Used by tests/handoff/test_megatron_real.py when MEGATRON_LM points at a checkout.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator


def megatron_view(checkout: str, argv: list[str], world_size: int, env: dict[str, str], device_arch: int = 9) -> dict:
    """Run Megatron's parse_args + validate_args on ``argv`` and build the model's TransformerConfig from
    the result (its checks raise as at launch); return the degrees, batch and recompute it derived, and its theoretical weight and optimizer memory per GPU. On a CPU the GPU's compute
    capability major (``device_arch``: 8 A100, 9 H100/H200, 10 B200) is told to validate_args, which asks
    the device for it."""
    import typing

    if not hasattr(typing, "override"):
        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, checkout)
    os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
    os.environ.update(env, RANK="0", WORLD_SIZE=str(world_size), LOCAL_RANK="0")
    sys.argv = ["pretrain_gpt.py", *argv]
    import megatron.training.arguments as margs

    margs.get_device_arch_version = lambda: device_arch
    # validate_args asks torch for the device's capability where the plan uses grouped GEMMs (every MoE
    # export: --moe-grouped-gemm); on a CPU build torch.cuda has no device, so tell it the plan GPU's.
    cuda = margs.torch.cuda
    asked, cuda.get_device_capability = cuda.get_device_capability, lambda *_a, **_k: (device_arch, 0)
    from megatron.training.arguments import parse_args, validate_args
    from megatron.training.theoretical_memory_usage import (
        compute_activation_memory,
        compute_activation_memory_without_sp,
        compute_weight_and_optimizer_memory,
    )
    from megatron.training.vocab_utils import calculate_padded_vocab_size

    try:
        args = validate_args(parse_args())
        # the model's TransformerConfig, as pretrain_gpt builds it: its __post_init__ holds the rest of the
        # checks (MoE all-to-all overlap, recompute, fp8/fp4 recipes). It asks for Transformer Engine, which a
        # CPU build lacks and the plan's GPU host has: it is told a current one (2.14) is installed.
        from megatron.training.argument_utils import core_transformer_config_from_args

        with _transformer_engine_present():
            core_transformer_config_from_args(args)
    finally:
        cuda.get_device_capability = asked
    keys = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
            "context_parallel_size", "expert_model_parallel_size", "data_parallel_size", "micro_batch_size",
            "global_batch_size", "recompute_granularity", "sequence_parallel", "use_distributed_optimizer",
            "num_layers", "hidden_size", "seq_length", "padded_vocab_size")
    # NullTokenizer adds an end-of-document token; Megatron pads the vocabulary for TP.
    args.padded_vocab_size = calculate_padded_vocab_size(args.vocab_size + 1, args.make_vocab_size_divisible_by,
                                                         args.tensor_model_parallel_size, logging_enabled=False)
    out = {k: getattr(args, k, None) for k in keys}
    m = args.global_batch_size // (args.micro_batch_size * args.data_parallel_size)
    out["num_microbatches"] = m
    out["weight_and_optimizer_bytes"] = compute_weight_and_optimizer_memory(args, verbose=False)
    with_sp = args.sequence_parallel and args.recompute_granularity == "selective"  # report_theoretical_memory's choice
    act = compute_activation_memory if with_sp else compute_activation_memory_without_sp
    out["activation_bytes"] = act(args, num_microbatches=m, verbose=False)
    return out


@contextlib.contextmanager
def _transformer_engine_present(version: str = "2.14.0") -> Iterator[None]:
    """TransformerConfig's Transformer Engine checks answered as on a host with TE ``version``."""
    import megatron.core.models.common.embeddings.rope_utils as rope
    import megatron.core.transformer.transformer_config as tc
    from packaging.version import Version

    saved = tc.is_te_min_version, tc.get_te_version, rope.fused_apply_rotary_pos_emb
    tc.is_te_min_version = lambda v, check_equality=True: Version(version) >= Version(v)
    tc.get_te_version = lambda: Version(version)
    rope.fused_apply_rotary_pos_emb = rope.fused_apply_rotary_pos_emb or (lambda *a, **k: None)
    try:
        yield
    finally:
        tc.is_te_min_version, tc.get_te_version, rope.fused_apply_rotary_pos_emb = saved


def main() -> None:
    checkout, job_path = sys.argv[1], sys.argv[2]
    from shardwise.handoff import export_train
    from shardwise.specs.job import load_jobs

    job = load_jobs(job_path)[0]
    exp = export_train(job, "megatron")
    print(json.dumps(megatron_view(checkout, exp.args, job.cluster.num_gpus, exp.env), indent=1, default=str))


if __name__ == "__main__":
    main()
