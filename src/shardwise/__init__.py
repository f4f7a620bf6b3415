"""Shardwise: plan, simulate and verify parallel execution plans for LLM training and serving."""

from shardwise.errors import ShardwiseError

__all__ = ["ShardwiseError"]
__version__ = "0.1.0"
