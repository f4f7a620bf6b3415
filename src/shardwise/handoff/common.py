"""What every export is: the engine's own arguments, the launcher around them, the files they read,
rendered as ``args`` (one shell-quoted line), ``script`` (a runnable launch script) or ``file`` (the
engine's config file)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from shardwise.errors import ShardwiseError

FORMATS = ("args", "script", "file")


@dataclass
class Export:
    """One engine's launch of one plan. ``files`` are written next to the output (name -> text);
    ``config_file`` is what ``--format file`` prints; ``notes`` explain what the engine sees differently."""

    engine: str
    version: str
    args: list[str]
    launcher: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    config_file: tuple[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    title: str = ""
    script_writes_config: bool = True  # the launch reads config_file, so the script writes it

    def render(self, fmt: str) -> str:
        if fmt == "args":
            return shlex.join(self.args) + "\n"
        if fmt == "script":
            return self.script()
        if fmt == "file":
            if self.config_file is None:
                raise ShardwiseError(f"--format file: {self.engine} {self.version} has no config file for this "
                                     "plan; use --format args or script")
            return self.config_file[1]
        raise ShardwiseError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")

    def script(self) -> str:
        """A bash script: the files as here-documents, the environment, the launcher and the arguments."""
        lines = ["#!/usr/bin/env bash", f"# {self.title or self.engine} -- written by shardwise for {self.engine} {self.version}"]
        lines += [f"# note: {n}" for n in self.notes]
        lines += ["set -euo pipefail", ""]
        files = dict(self.files)
        if self.config_file is not None and self.script_writes_config:
            files.setdefault(*self.config_file)
        for name, text in files.items():
            lines += [f"cat > {shlex.quote(name)} <<'SHARDWISE_EOF'", text.rstrip("\n"), "SHARDWISE_EOF", ""]
        for k, v in self.env.items():
            lines.append(f"export {k}={v}")
        words = self.launcher + [_quote(w) for w in self.args]  # launcher words may hold ${VAR}
        lines += ["", " \\\n    ".join(_lines(words)), ""]
        return "\n".join(lines)


def _quote(word: str) -> str:
    """Shell-quote an argument; one holding ${VAR} (a host or path the user sets) in double quotes, so the
    shell expands it."""
    if "${" in word and not any(c in word for c in '"`\\'):
        return f'"{word}"'
    return shlex.quote(word)


def _lines(words: list[str]) -> list[str]:
    """One option and its values per line (cosmetic: the shell sees the same words)."""
    out: list[str] = []
    for w in words:
        follows = out and not w.startswith("-") and (not out[-1].startswith("-") or "=" not in out[-1])
        if follows:
            out[-1] += " " + w
        else:
            out.append(w)
    return out


def torchrun(nproc_per_node: int, nodes: int, module: str | None = None, script: str | None = None) -> list[str]:
    """A torchrun launcher for `nodes` nodes (node rank and master address from the environment)."""
    words = ["torchrun", f"--nnodes={nodes}", f"--nproc-per-node={nproc_per_node}"]
    if nodes > 1:
        words += ["--node-rank=${NODE_RANK:-0}", "--rdzv-backend=c10d", "--rdzv-endpoint=${MASTER_ADDR:-localhost}:${MASTER_PORT:-29500}"]
    return words + (["-m", module] if module else [script or ""])
