"""The engines are pinned once: pyproject's `engines` extra installs the releases the rules table was read
at, .ci/run installs that extra, and the install is checked for downgrades."""

import sys
import tomllib
from pathlib import Path

from shardwise.engines.table import VERSIONS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from no_downgrades import downgrades  # noqa: E402


def test_the_engines_extra_pins_the_tables_versions_and_ci_installs_it():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["engines"]
    pins = dict(x.split("==") for x in extra)
    assert pins["torchtitan"] == VERSIONS["torchtitan"] and pins["deepspeed"] == VERSIONS["deepspeed"]
    ci = (ROOT / ".ci/run").read_text()
    assert "-e '.[engines]'" in ci and "no_downgrades.py" in ci
    assert "torchtitan==" not in ci and "deepspeed==" not in ci  # pinned in one place


def test_downgrades_are_named_and_upgrades_pass():
    before = "numpy==2.1.0\npydantic==2.9.2\ntyper==0.12.0\n-e file:///src\n"
    after = "numpy==1.26.4\npydantic==2.10.0\ntorchtitan==0.3.0\n"
    assert downgrades(before, after) == ["numpy 2.1.0 -> 1.26.4", "typer 0.12.0 was removed"]
    assert downgrades(before, before) == []
