"""The one exception type users see, and how a user's value is echoed in it.

Every error a user can cause (unknown GPU, impossible plan, malformed job file, ...) is raised as
:class:`ShardwiseError` with a message that says what is wrong and how to fix it. The CLI prints the
message on one line, without a traceback, and exits with status 2. Values are echoed through
:func:`shorten`, so a 20 kB string or a 5,000-digit number never floods the terminal.
"""

from __future__ import annotations

import reprlib

from shardwise.limits import MAX_ECHO_CHARS


class ShardwiseError(ValueError):
    """A user-caused error: the message names the offending field and how to fix it."""


class CheckFailed(ShardwiseError):
    """A verification ran and found a wrong result (e.g. `train run --check`): exit status 1, not 2."""


class _Short(reprlib.Repr):
    """reprlib with the project's echo limit; integers too long to print are described, not printed."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxtuple, self.maxlist, self.maxdict, self.maxset = 2, 4, 4, 4, 4
        self.maxstring = self.maxlong = self.maxother = MAX_ECHO_CHARS

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 3 * MAX_ECHO_CHARS:  # repr() itself refuses ints beyond 4,300 digits
            return f"<an integer of about {int(x.bit_length() * 0.30103):,} digits>"
        return super().repr_int(x, level)


_SHORT = _Short()


def shorten(value: object) -> str:
    """A bounded repr of a user's value (about MAX_ECHO_CHARS characters at most)."""
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still described
        return f"<a {type(value).__name__}>"


def clip(text: str, limit: int = 4 * MAX_ECHO_CHARS) -> str:
    """Cut a message (or a piece of one) that would not fit on a line."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
