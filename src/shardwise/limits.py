"""Explicit bounds on what one command may be asked to do, checked before the work starts.

Every limit is named here, listed in the README ("Limits"), and every error that cites one says how
to proceed. The bounds are far beyond any real job (the largest published training runs use pp 16 on
16,384 GPUs; production serving engines cap a batch at a few hundred sequences); they exist so a typo
such as ``pp: 100000`` or ``num_requests: 1e9`` ends in one line instead of exhausting memory.
Schedule sizes were set with ``benchmarks/schedules.py``-style timings: the largest legal schedule
generates and simulates in a few seconds on one core.
"""

from __future__ import annotations

# --- any number in a job file or on the command line ------------------------------------------------
#: Largest magnitude accepted for any number in a job file (floats are exact integers up to 2^53).
MAX_NUMBER = 10**15
#: Deepest nesting of a YAML/JSON job file (real job files are 4 levels deep).
MAX_DOCUMENT_DEPTH = 32
#: Characters of a user's value echoed back in an error message.
MAX_ECHO_CHARS = 80

# --- pipeline schedules ---------------------------------------------------------------------------------
#: Pipeline ranks of one schedule (pp) — `schedule simulate`, `train estimate`, `train plan`.
MAX_PIPELINE_RANKS = 256
#: Compute actions (F, I, W, B) one generated, imported or simulated schedule may hold.
MAX_SCHEDULE_ACTIONS = 1_000_000
#: Largest time of one action given to `schedule simulate` (any unit): sums over a schedule stay finite.
MAX_ACTION_TIME = 1e12
#: Largest activation amount of one stage and micro-batch given to the simulator (any unit; `train estimate`
#: passes bytes): far above any GPU's memory, so an over-large plan is reported as not fitting, with its size.
MAX_ACTIVATION_AMOUNT = 1e18
#: Micro-batches `train estimate` simulates; beyond this the steady state, which repeats, is extrapolated
#: exactly (see shardwise.train.pipeline_timing).
SIMULATED_MICROBATCHES = 256

# --- training jobs and clusters ------------------------------------------------------------------------
#: GPUs of one training cluster (the largest published runs use 16,384-100,000).
MAX_CLUSTER_GPUS = 1_000_000
#: Virtual pipeline stages (pp x vpp) of one training plan (Llama 3 405B: 16 x 8 = 128). The estimate's
#: representative simulations (8 micro-batches per stage) then stay within MAX_SCHEDULE_ACTIONS.
MAX_PIPELINE_STAGES = 128
#: Tokens of one sequence: a training sample, or a request's prompt or output (10M: the longest context
#: any model advertises today).
MAX_SEQUENCE_TOKENS = 10_000_000

# --- train run (real processes on this machine) -----------------------------------------------------------
#: Processes `train run` may launch, steps it may run, and parameters of the model it builds for real.
MAX_RUN_PROCESSES = 64
MAX_RUN_STEPS = 10_000
MAX_RUN_PARAMS = 500_000_000

# --- serving -------------------------------------------------------------------------------------------
#: Requests one serving simulation may hold (about 25,000-30,000 are simulated per second).
MAX_SERVE_REQUESTS = 1_000_000
#: Requests per candidate simulation of `serve plan` (it runs hundreds of them; the default is 600).
MAX_PLAN_REQUESTS = 20_000
#: Engines (replicas x pp, summed over the pools) of one simulated deployment.
MAX_SERVE_ENGINES = 4096
#: LoRA adapters one serving deployment may name (S-LoRA serves 2,000 on one GPU).
MAX_SERVE_ADAPTERS = 1_000_000

#: Coefficient of variation of gamma inter-arrival gaps: above 10 the gamma shape 1/cv^2 < 0.01 makes
#: nearly every gap underflow to zero (use `rate: inf` to send every request at once).
MAX_GAMMA_CV = 10.0
#: Engine knobs: sequences per batch and tokens per KV block (vLLM's defaults are 256 and 16).
MAX_NUM_SEQS = 65_536
MAX_BLOCK_SIZE = 4096

#: What to do instead, per job-file field whose bound is one of the limits above (used in the error).
HOW_TO_PROCEED = {
    "num_requests": "percentiles settle within a few thousand requests; lower num_requests",
    "replicas": "replicas behind a router are alike: simulate fewer at a proportionally lower rate",
    "cv": "above 10 nearly every gamma gap underflows to zero; use rate: inf to send every request at once",
    "prefix_groups": "use fewer shared prefixes than requests",
    "value": "no model serves a longer request; give a shorter length",
    "min": "no model serves a longer request; give a shorter length",
    "max": "no model serves a longer request; give a shorter length",
    "median": "no model serves a longer request; give a shorter length",
    "prefix_len": "no model serves a longer request; give a shorter prefix",
    "max_num_seqs": "production engines batch a few hundred sequences; lower it",
    "block_size": "vLLM uses 16-token blocks; lower it",
    "max_num_batched_tokens": "lower the per-iteration token budget",
    "max_model_len": "no model serves a longer context; lower it",
    "pp": "use fewer pipeline ranks",
    "vpp": "use fewer virtual stages per rank",
    "gpus": "plan a smaller cluster",
    "seq_len": "no model trains on longer sequences; give a shorter seq_len",
}
