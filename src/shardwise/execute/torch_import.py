"""torch is an optional extra: import it where a run needs it, or say how to install it."""

from __future__ import annotations

from shardwise.errors import ShardwiseError

INSTALL_HINT = ("install the exec extra: pip install -e '.[exec]' (on this project's machines: "
                "pip install torch==2.13.0, a CPU build)")


def require_torch():
    """Import torch or raise ShardwiseError saying how to install it."""
    try:
        import torch
    except ImportError:
        raise ShardwiseError(f"train run needs PyTorch, which is not installed; {INSTALL_HINT}") from None
    return torch
