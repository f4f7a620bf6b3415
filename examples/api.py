"""From a question to a launch command with the Python API: plan, estimate, export, and a serving check.

    python examples/api.py
"""

from pathlib import Path

from shardwise import describe, estimate, export, plan, simulate_serving

HERE = Path(__file__).parent

# The best plans Megatron-LM runs as is, for Llama-3.1-8B on 16 H100s.
result = plan("llama-3.1-8b", "h100", 16, seq_len=4096, global_batch=64, runnable_on=("megatron",), top=3)
best = result.top[0]
print(f"best plan: {describe(best)} -> {best.tokens_per_s_per_gpu:,.0f} tokens/s/GPU, {best.peak_memory_gib:.1f} GiB")

# The same plan as a job, estimated again and handed off to Megatron-LM.
job = {"model": "llama-3.1-8b", "cluster": {"gpu": "h100", "gpus": 16},
       "training": {"seq_len": 4096, "global_batch": 64}, "parallel": best.plan}
print(f"estimate: step {estimate(job).step_time_s:.3f} s")
print(export(job, "megatron", format="args"))

# A serving deployment: simulated, then as the vLLM command.
served = simulate_serving(HERE / "serve-llama3.1-8b-a100.yaml")
print(f"serving: {served['request_throughput']:.2f} req/s, TTFT p90 {served['ttft_ms']['p90']:.0f} ms")
print(export(HERE / "serve-llama3.1-8b-a100.yaml", "vllm", format="args"))
