"""Fail when installing something lowered or removed a package that was installed before.

    pip freeze > before.txt; pip install ...; pip freeze > after.txt
    python scripts/no_downgrades.py before.txt after.txt [PACKAGE ...]

Prints each package whose version went down (or that disappeared) and exits 1; prints nothing and exits 0
otherwise. Named packages limit the check to them (.ci/run guards torch and the build tools around the one
install that resolves the project's extras and the engines together: the resolver may then pick other
versions of torch's own dependencies, which is its job, but must not swap the torch build)."""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version


def pins(text: str) -> dict[str, str]:
    """``name==version`` lines of ``pip freeze`` (names normalised); other lines (editable installs, URLs) skipped."""
    out = {}
    for line in text.splitlines():
        name, sep, version = line.strip().partition("==")
        if sep and not name.startswith("#"):
            out[name.lower().replace("_", "-")] = version
    return out


def downgrades(before: str, after: str, only: list[str] | None = None) -> list[str]:
    """One line per package whose version went down or that was removed (of `only`, where given)."""
    old, new = pins(before), pins(after)
    if only:
        wanted = {name.lower().replace("_", "-") for name in only}
        old = {name: version for name, version in old.items() if name in wanted}
    lines = []
    for name, version in sorted(old.items()):
        if name not in new:
            lines.append(f"{name} {version} was removed")
            continue
        try:
            lower = Version(new[name]) < Version(version)
        except InvalidVersion:
            lower = new[name] != version
        if lower:
            lines.append(f"{name} {version} -> {new[name]}")
    return lines


def main() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: no_downgrades.py BEFORE.txt AFTER.txt [PACKAGE ...]")
    lines = downgrades(Path(sys.argv[1]).read_text(), Path(sys.argv[2]).read_text(), sys.argv[3:])
    for line in lines:
        print(f"downgraded: {line}")
    sys.exit(1 if lines else 0)


if __name__ == "__main__":
    main()
