"""The web planner's tests need the `web` extra (FastAPI); they are skipped without it."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("fastapi", reason="the web planner needs the web extra: pip install -e '.[web]'")
pytest.importorskip("httpx", reason="FastAPI's test client needs httpx (the webtest extra)")

from fastapi.testclient import TestClient

from shardwise.cli.main import main
from shardwise.web.app import WebSettings, create_app, finite
from shardwise.web.jobs import Limits


@pytest.fixture(scope="module")
def client():
    """One app (and one search worker) per test module; searches limited to 60 s."""
    app = create_app(WebSettings(limits=Limits(time_limit_s=60.0)))
    with TestClient(app) as c:
        yield c


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """What `shardwise ARGV --format json` prints, with non-finite numbers as null (as the API sends them)."""
    capsys.readouterr()
    assert main([*argv, "--format", "json"]) == 0, capsys.readouterr().err
    return finite(json.loads(capsys.readouterr().out))


def cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one-line message of a CLI user error (without its `error: ` prefix)."""
    capsys.readouterr()
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err, err
    return err.removeprefix("error: ")
