"""The one exception type users see.

Every error a user can cause (unknown GPU, impossible plan, malformed job file, ...) is raised as
:class:`ShardwiseError` with a message that says what is wrong and how to fix it. The CLI prints the
message on one line, without a traceback, and exits with status 2.
"""


class ShardwiseError(ValueError):
    """A user-caused error: the message names the offending field and how to fix it."""


class CheckFailed(ShardwiseError):
    """A verification ran and found a wrong result (e.g. `train run --check`): exit status 1, not 2."""
