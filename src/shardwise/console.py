"""One rich console for every command: full terminal width, or 160 columns when output is piped."""

from __future__ import annotations

import sys

from rich.console import Console


def make_console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=160)
