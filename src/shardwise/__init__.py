"""Shardwise: plan, simulate and verify parallel execution plans for LLM training and serving.

Python API (typed, documented in :mod:`shardwise.api`)::

    from shardwise import estimate, plan, simulate_serving, export, describe
"""

from shardwise.api import describe, estimate, export, plan, simulate_serving
from shardwise.errors import ShardwiseError

__all__ = ["ShardwiseError", "describe", "estimate", "export", "plan", "simulate_serving"]
__version__ = "0.1.0"
