"""The engines are pinned once: pyproject's `engines` extra installs the releases the rules table was read
at, .ci/run installs that extra, and the install is checked for downgrades."""

import re
import sys
import tomllib
from pathlib import Path

from shardwise.engines.table import VERSIONS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from no_downgrades import downgrades  # noqa: E402


def _engines_install(ci: str) -> re.Match:
    """The one `pip install --no-build-isolation -e '.[extras]'` line of .ci/run."""
    found = re.search(r"pip install --quiet --no-build-isolation -e '\.\[([a-z,]+)\]'", ci)
    assert found, ".ci/run has no no-build-isolation install of the project's extras"
    return found


def test_the_engines_extra_pins_the_tables_versions_and_ci_installs_it():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["engines"]
    pins = dict(x.split("==") for x in extra)
    assert pins["torchtitan"] == VERSIONS["torchtitan"] and pins["deepspeed"] == VERSIONS["deepspeed"]
    ci = (ROOT / ".ci/run").read_text()
    extras = _engines_install(ci).group(1).split(",")
    # one resolve for the engines and the suite's own extras, so the engines cannot lower what the suite uses
    assert {"engines", "dev", "web", "webtest"} <= set(extras) and "no_downgrades.py" in ci
    assert "torchtitan==" not in ci and "deepspeed==" not in ci  # pinned in one place


def test_downgrades_are_named_and_upgrades_pass():
    before = "numpy==2.1.0\npydantic==2.9.2\ntyper==0.12.0\n-e file:///src\n"
    after = "numpy==1.26.4\npydantic==2.10.0\ntorchtitan==0.3.0\n"
    assert downgrades(before, after) == ["numpy 2.1.0 -> 1.26.4", "typer 0.12.0 was removed"]
    assert downgrades(before, before) == []
    assert downgrades(before, after, ["typer"]) == ["typer 0.12.0 was removed"]
    assert downgrades(before, after, ["pydantic"]) == []


def test_ci_guards_torch_and_the_build_tools_around_the_engines_install():
    ci = (ROOT / ".ci/run").read_text()
    guard = next(line for line in ci.splitlines() if "no_downgrades.py" in line)
    assert {"torch", "setuptools", "wheel"} <= set(guard.split()[3:])


def test_ci_gives_the_no_isolation_engines_install_the_build_tools_pyproject_needs():
    """pyproject's license is a PEP 639 string, which setuptools reads from 77 on; a fresh Python 3.11 venv
    has setuptools 65.5 and no wheel, and `pip install --no-build-isolation` builds with the venv's own."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert isinstance(project["project"]["license"], str)
    assert "setuptools>=77" in project["build-system"]["requires"] and "wheel" in project["build-system"]["requires"]
    ci = (ROOT / ".ci/run").read_text()
    engines = _engines_install(ci).start()
    assert "pip install --quiet 'setuptools>=77' wheel" in ci[:engines]
