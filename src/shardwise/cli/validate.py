"""`shardwise validate`: prediction error against public measurements."""


def validate() -> None:
    """Estimate every applicable calibration record and report the error per source."""
    raise NotImplementedError
