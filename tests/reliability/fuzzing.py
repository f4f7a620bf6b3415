"""Seeded generator of malformed and extreme CLI inputs, and the classifier of what the CLI did with them.

Shared by tests/reliability/test_fuzz.py (a few hundred cases in `make test`) and benchmarks/fuzz.py (a
few thousand in worker processes with time and memory limits). A case is a command line plus the files
it reads, generated from a valid base input by replacing one to three values, dropping or adding fields,
or replacing a whole file (binary bytes, another encoding, nesting, YAML alias bombs, a scalar).

Outcome classes:

- ``traceback``: an exception escaped, or the exit status was neither 0 nor 2;
- ``hang`` / ``crash``: past the time limit / killed or out of memory (worker processes only);
- ``nan_inf``: NaN or Infinity in the output;
- ``impossible``: a utilisation or fraction outside [0, 1], a negative time or memory in an answer;
- ``messy_error``: exit status 2 but not one short ``error: ...`` line;
- ``clean_error``: exit status 2 with one short line;
- ``answer``: exit status 0 and a plausible output.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

CLASSES = ("traceback", "hang", "crash", "nan_inf", "impossible", "messy_error", "clean_error", "answer")
BAD = ("traceback", "hang", "crash", "nan_inf", "impossible", "messy_error")
MAX_ERROR_CHARS = 600

PLACEHOLDER = "@@NASTY@@"

# Raw tokens spliced into a YAML document in place of one value.
YAML_TOKENS = [
    "0", "-1", "-0", "1.5", "0.5", "1e400", "-1e400", ".nan", ".NaN", ".inf", "-.inf", "18446744073709551616",
    "9" * 5000, "-" + "9" * 40, "''", "'" + "x" * 20000 + "'", "true", "false", "null", "~", "[]", "{}", "[1, 2]",
    "{a: 1}", "'𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ✓'", "\"\\0\"", "[" * 60 + "]" * 60, "0x7fffffff", "0o17", "1_000", "'1e7'", "1e7",
    "2.5e-320", "!!binary aGVsbG8=", "!!float nan", "&a [*a]", "'inf'", "'nan'", "'-1'", "'  '", "12:30:00",
    "2023-11-16", "1.0e+15", "1.0e+16", "4096", "65536", "100000000", "-65536", "'h100'", "'zbv'", "'auto'",
]
# Raw tokens spliced into a JSON document.
JSON_TOKENS = [
    "0", "-1", "1e400", "-1e400", "NaN", "Infinity", "-Infinity", "1" * 5000, '""', '"' + "x" * 20000 + '"', "true",
    "null", "[]", "{}", "[" * 60 + "]" * 60, '"\\u0000"', "1.0e-400", "3.7", "18446744073709551616", '"nan"',
]
INT_FLAGS = ["0", "-1", "1", "2", "3", "4", "7", "8", "64", "256", "257", "100000", "99999999999999999999", "1e3",
             "abc", "nan", "", "-99999999999999999999"]
FLOAT_FLAGS = ["0", "-1", "1", "0.5", "1e308", "1e400", "nan", "inf", "-inf", "1e-320", "abc", "", "1" * 400]
TIME_FLAGS = ["1", "0", "-1", "nan", "inf", "1e308", "1,2", "1,,2", "", "x", "1,2,3,4", "0,0,0,0", "1e-320", ",",
              "1," * 300]
SCHEDULES = ["1f1b", "gpipe", "interleaved", "bfs", "zb-h1", "zb-h2", "zbv", "v-half", "v-min", "dualpipev", "auto",
             "", "x" * 300, "ZBV ", "1F1B-I", "none"]
MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "deepseek-v3", "gpt-1.7b", "", "x" * 300, "missing.json",
          "config.json", "llama-9000", "a\x00b"]
GPUS = ["h100", "a100-80gb", "l4", "H100-SXM", "mi300x", "", "tpu", "x" * 300, "h100,a100-80gb"]

TRAIN_BASE: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "cluster": {"gpu": "H100-SXM", "gpus": 16, "gpus_per_node": 8, "inter_node_gbps": 400},
    "training": {"seq_len": 4096, "global_batch": 64, "precision": "bf16", "tokens": 1e12},
    "parallel": {"tp": 2, "pp": 2, "vpp": 1, "cp": 1, "ep": 1, "dp": "auto", "zero": 1, "sequence_parallel": True,
                 "recompute": "selective", "micro_batch": 1, "schedule": "1f1b"},
}
MOE_MODEL = {"layers": 8, "hidden": 1024, "heads": 16, "kv_heads": 4, "ffn": 2048, "vocab": 32000, "experts": 8,
             "top_k": 2, "expert_ffn": 1024}
SMALL_MODEL = {"layers": 4, "hidden": 256, "heads": 8, "kv_heads": 2, "ffn": 512, "vocab": 1000}
SERVE_BASE: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "precision": "bf16",
    "deployment": {"gpu": "a100-80gb", "tp": 1, "pp": 1, "replicas": 1,
                   "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 4096, "chunked_prefill": True,
                              "gpu_memory_utilization": 0.9, "block_size": 16, "prefix_caching": False}},
    "workload": {"arrival": "poisson", "rate": 4.0, "num_requests": 30, "input_len": {"dist": "sharegpt"},
                 "output_len": {"dist": "sharegpt"}, "seed": 0},
    "slo": {"ttft_ms": 300, "tpot_ms": 50},
}
DISAGG = {"prefill": {"gpu": "h100", "tp": 2, "replicas": 1}, "decode": {"gpu": "h100", "tp": 2, "replicas": 1},
          "kv_link_gbps": 400}
POOLS = {"pools": [{"gpu": "a10g", "tp": 2, "classes": [{"input": [1, 500], "output": [1, 1000000000], "share": 1.0}]},
                   {"gpu": "h100", "tp": 1}]}
TRACE = "TIMESTAMP,ContextTokens,GeneratedTokens\n0,512,64\n0.5,1024,128\n1.25,300,20\n2,2000,5\n"
TRACE_TOKENS = ["nan", "inf", "-1", "0", "1.5", "1e400", "9" * 5000, "", "abc", "2023-11-16 18:15:46.6805900",
                "10000001", "1e7", "-inf", "x" * 3000, '"', "1,2"]
CSV_TOKENS = ["0F0", "0F99999999999", "0F" + "9" * 5000, "9F0", "0X0", "", "0F-1", "0I0", "0W0", "0B0", "(0F1;1B0)OVERLAP_F_B",
              "1SEND_F0", "0REDUCE_GRAD", "F", "0F", '"', "0F0,0F0", "x" * 2000, "0F999999", "255F0", "0B999999999"]


@dataclass
class Case:
    """One CLI invocation: argv (relative paths resolve in the case's folder) and the files it reads."""

    label: str
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)


def _leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    out = [path] if path else []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _leaves(v, (*path, i))
    return out


def _set(doc: Any, path: tuple, value: Any) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


def _delete(doc: Any, path: tuple) -> None:
    for k in path[:-1]:
        doc = doc[k]
    if isinstance(doc, dict):
        doc.pop(path[-1], None)


def _deep_copy(doc: Any) -> Any:
    return json.loads(json.dumps(doc))


# Plausible replacements for string fields, so that extreme but legal jobs reach an answer too.
ALTERNATIVES = {
    "model": MODELS[:5], "gpu": ["h100", "a100-80gb", "l4", "a10g", "mi300x", "h200", "b200", "rtx-4090"],
    "precision": ["bf16", "fp16", "fp8", "fp32"], "schedule": SCHEDULES[:11], "recompute": ["none", "selective", "full"],
    "arrival": ["poisson", "gamma", "fixed"], "dist": ["sharegpt", "fixed", "uniform", "lognormal"],
    "router": ["round_robin", "least_outstanding"], "rate": [0.01, 1000.0, "inf"],
}
SCALES = [0.0, 1e-6, 1e-3, 0.5, 2, 3, 10, 1000, 1e6]


def _legal_extreme(rng: random.Random, path: tuple, value: Any) -> Any:
    key = next((str(k) for k in reversed(path) if isinstance(k, str)), "")
    if key in ALTERNATIVES and not isinstance(value, dict | list):
        return rng.choice(ALTERNATIVES[key])
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return rng.choice([1, 2, 3, max(1, value * 2), max(1, value // 2), value * 1000, value * 10**6])
    if isinstance(value, float):
        return value * rng.choice(SCALES)
    return value


def mutate_document(rng: random.Random, base: dict[str, Any], as_json: bool) -> bytes:
    """A job document with one to three values replaced (by malformed tokens, or by legal but extreme
    values), fields dropped or unknown fields added."""
    doc = _deep_copy(base)
    raw: list[str] = []
    for _ in range(rng.randint(1, 3)):
        paths = _leaves(doc)
        if not paths:
            break
        path = rng.choice(paths)
        action = rng.random()
        if action < 0.35:
            parent = doc
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = _legal_extreme(rng, path, parent[path[-1]])
        elif action < 0.7:
            raw.append(rng.choice(JSON_TOKENS if as_json else YAML_TOKENS))
            _set(doc, path, PLACEHOLDER + str(len(raw) - 1))
        elif action < 0.8:
            _delete(doc, path)
        elif action < 0.9:
            parent = doc
            for k in path[:-1]:
                parent = parent[k]
            if isinstance(parent, dict):
                parent[rng.choice(["bogus", "tp ", "Model", "extra"])] = 1
        else:
            _set(doc, path, rng.choice([0, -3, 10**6, 2**31, 2.5, "", "x", True, None, [], {}]))
    text = json.dumps(doc) if as_json else yaml.safe_dump(doc, default_flow_style=None, sort_keys=False, width=10**6)
    for k, token in enumerate(raw):
        tag = PLACEHOLDER + str(k)
        text = text.replace(f'"{tag}"', token).replace(f"'{tag}'", token).replace(tag, token)
    return text.encode("utf-8", "surrogatepass")


def whole_file(rng: random.Random) -> bytes:
    """A file no job holds: binary, another encoding, a scalar, nesting, an alias bomb, or empty."""
    kind = rng.randrange(9)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    if kind == 1:
        return yaml.safe_dump(TRAIN_BASE).encode("utf-16")
    if kind == 2:
        return rng.choice([b"", b"   \n", b"42\n", b"- \n", b"[]\n", b"null\n", b"'just a string'\n"])
    if kind == 3:
        n = rng.choice([40, 200, 5000])
        return (b"[" * n) + (b"]" * n)
    if kind == 4:
        lines = ["a: &a ['x', 'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x']"]
        for k in range(1, 9):
            prev = chr(ord("a") + k - 1)
            lines.append(f"{chr(ord('a') + k)}: &{chr(ord('a') + k)} [" + ", ".join([f"*{prev}"] * 9) + "]")
        lines.append(f"model: *{chr(ord('a') + 8)}")
        return ("\n".join(lines) + "\n").encode()
    if kind == 5:
        return b"model: {" + b"a: {" * 500 + b"}" * 501 + b"\n"
    if kind == 6:
        return ("model: llama-3.1-8b\n" + "cluster: {gpu: h100}\n" * 3).encode()
    if kind == 7:
        return b"\xef\xbb\xbf" + yaml.safe_dump(TRAIN_BASE).encode()  # UTF-8 with a byte-order mark: valid
    return b"model: 'unterminated\n"


def _train_case(rng: random.Random) -> Case:
    base = _deep_copy(TRAIN_BASE)
    base["model"] = rng.choice(["llama-3.1-8b", "llama-3.1-70b", SMALL_MODEL, MOE_MODEL, "config.json"])
    if base["model"] == MOE_MODEL:
        base["parallel"]["ep"] = rng.choice([1, 2])
    base["parallel"]["schedule"] = rng.choice(SCHEDULES[:11])
    if rng.random() < 0.3:
        base["training"]["global_batch"] = rng.choice([64, 4096, 10**6, 10**9, 10**12])
    files = {"config.json": json.dumps({"hidden_size": 512, "num_hidden_layers": 4, "num_attention_heads": 8,
                                        "vocab_size": 1000, "intermediate_size": 1024}).encode()}
    as_json = rng.random() < 0.3
    name = "job.json" if as_json else "job.yaml"
    r = rng.random()
    if r < 0.12:
        files[name] = whole_file(rng)
    elif r < 0.2:
        cfg = {"hidden_size": rng.choice([512, "512", -1, 0, None, 1e400 if False else 10**20]),
               "num_hidden_layers": rng.choice([4, 0, "x", [1]]), "num_attention_heads": rng.choice([8, 3, 0]),
               "vocab_size": 1000, "num_local_experts": rng.choice([None, 8, "8"]), "num_experts_per_tok": 2,
               "kv_lora_rank": rng.choice([0, 64]), "qk_rope_head_dim": rng.choice([None, "a", 64]),
               "qk_nope_head_dim": rng.choice([None, 128, "b"]),
               "shared_expert_intermediate_size": rng.choice([None, 0, "x", 512])}
        files["config.json"] = json.dumps({k: v for k, v in cfg.items() if v is not None}).encode()
        files[name] = (json.dumps if as_json else yaml.safe_dump)({**base, "model": "config.json"}).encode()
    else:
        files[name] = mutate_document(rng, base, as_json)
    command = ["train", "estimate"] if rng.random() < 0.85 else ["train", "plan", "--exact-budget", "4", "--no-progress"]
    return Case(f"{' '.join(command[:2])} file", [*command, name, "-f", "json"], files)


def _serve_case(rng: random.Random) -> Case:
    base = _deep_copy(SERVE_BASE)
    files: dict[str, bytes] = {}
    r = rng.random()
    if r < 0.2:
        base["deployment"] = _deep_copy(DISAGG)
    elif r < 0.3:
        base["deployment"] = _deep_copy(POOLS)
    if rng.random() < 0.35:
        base["workload"] = {"arrival": "trace", "path": "trace.csv"}
        rows = TRACE.splitlines()
        if rng.random() < 0.7:
            k = rng.randrange(1, len(rows))
            cells = rows[k].split(",")
            cells[rng.randrange(3)] = rng.choice(TRACE_TOKENS)
            rows[k] = ",".join(cells)
        files["trace.csv"] = ("\n".join(rows) + "\n").encode() if rng.random() < 0.9 else whole_file(rng)
    elif rng.random() < 0.3:
        base["workload"]["arrival"] = rng.choice(["gamma", "fixed"])
        base["workload"]["cv"] = rng.choice([0.5, 2.0, 10.0])
    as_json = rng.random() < 0.3
    name = "serve.json" if as_json else "serve.yaml"
    files[name] = whole_file(rng) if rng.random() < 0.1 else mutate_document(rng, base, as_json)
    return Case("serve simulate file", ["serve", "simulate", name, "-f", "json"], files)


def _schedule_flags(rng: random.Random) -> Case:
    cmd = rng.choice(["simulate", "simulate", "export", "compare"])
    argv = ["schedule", cmd]
    if cmd != "compare":
        argv += ["--schedule", rng.choice(SCHEDULES)]
    for flag, pool, p in (("--pp", INT_FLAGS, 0.6), ("--microbatches", INT_FLAGS, 0.6), ("--vpp", INT_FLAGS, 0.3),
                          ("--f", TIME_FLAGS, 0.3), ("--i", TIME_FLAGS, 0.3), ("--w", TIME_FLAGS, 0.3),
                          ("--comm", FLOAT_FLAGS, 0.3), ("--mem-cap", FLOAT_FLAGS, 0.15), ("--w-retained", FLOAT_FLAGS, 0.15)):
        if rng.random() < p:
            argv += [flag, rng.choice(pool)]
    if cmd != "export":
        argv += ["--format", "json"]
    return Case(f"schedule {cmd} flags", argv)


def _schedule_csv(rng: random.Random) -> Case:
    from shardwise.pipeline import generate_schedule, write_csv_text

    sched = generate_schedule(rng.choice(["1f1b", "zbv", "interleaved", "dualpipev", "zb-h1"]), rng.choice([2, 4]), 8)
    rows = [r.split(",") for r in write_csv_text(sched).splitlines()]
    for _ in range(rng.randint(1, 3)):
        k = rng.randrange(len(rows))
        if not rows[k]:
            rows[k] = [rng.choice(CSV_TOKENS)]
            continue
        j = rng.randrange(len(rows[k]))
        action = rng.random()
        if action < 0.6:
            rows[k][j] = rng.choice(CSV_TOKENS)
        elif action < 0.8:
            del rows[k][j]
        else:
            rows.insert(rng.randrange(len(rows) + 1), [rng.choice(CSV_TOKENS)])
    text = "\n".join(",".join(r) for r in rows) + "\n"
    data = whole_file(rng) if rng.random() < 0.1 else text.encode()
    return Case("schedule import csv", ["schedule", "import", "sched.csv", "--format", "json"], {"sched.csv": data})


def _train_plan_flags(rng: random.Random) -> Case:
    argv = ["train", "plan", "--no-progress", "--exact-budget", rng.choice(["2", "4", "0", "-1"]), "-f", "json"]
    for flag, pool, p in (("--model", MODELS, 0.95), ("--gpu", GPUS, 0.95), ("--gpus", ["8", "16", "0", "-8", "3", "1000001", "nan", "99999999999999999999"], 0.95),
                          ("--seq-len", ["4096", "0", "-1", "3", "99999999999999999999"], 0.95),
                          ("--global-batch", ["16", "64", "0", "-1", "7", "10000000000"], 0.95),
                          ("--tokens", FLOAT_FLAGS, 0.3), ("--max-memory-gib", FLOAT_FLAGS, 0.3),
                          ("--top", ["1", "0", "-1", "1000000"], 0.3), ("--objective", ["throughput", "cost", "memory", "x"], 0.3),
                          ("--schedules", ["1f1b", "zbv,x", "", "auto"], 0.2), ("--precision", ["bf16", "fp8", "fp4"], 0.2)):
        if rng.random() < p:
            argv += [flag, rng.choice(pool)]
    return Case("train plan flags", argv)


def _serve_plan_flags(rng: random.Random) -> Case:
    argv = ["serve", "plan", "--no-disagg", "--no-mix", "--num-requests", rng.choice(["50", "0", "-1", "49", "10000000"]),
            "-f", "json", "--model", rng.choice(MODELS[:2] + MODELS[5:8])]
    for flag, pool, p in (("--rate", ["4", "0", "-1", "nan", "inf", "1e15", "1e-300"], 0.9),
                          ("--slo-ttft-ms", ["300", "0", "-1", "nan", "inf"], 0.7), ("--slo-tpot-ms", ["50", "nan", "-5"], 0.5),
                          ("--attainment", ["0.9", "2", "0", "nan"], 0.3),
                          ("--gpus", ["h100:1", "h100:0", "h100:-1", "h100:nan", "h100:99999999999999999999", "x:1", "h100:1,h100:1", ":", ""], 0.9),
                          ("--precision", ["bf16", "fp8", "int4"], 0.2)):
        if rng.random() < p:
            argv += [flag, rng.choice(pool)]
    return Case("serve plan flags", argv)


def _validate_file(rng: random.Random) -> Case:
    doc = {"records": [{"id": "x", "source": "y", "model": rng.choice(["llama-3.1-8b", 5, None]),
                        "measured": {"step_time_s": rng.choice([1.0, -1, "nan", None])}}]}
    data = whole_file(rng) if rng.random() < 0.5 else json.dumps(doc).encode()
    return Case("validate file", ["validate", "cal.json", "-f", "json"], {"cal.json": data})


GENERATORS = ((_train_case, 0.3), (_serve_case, 0.25), (_schedule_flags, 0.17), (_schedule_csv, 0.15),
              (_train_plan_flags, 0.06), (_serve_plan_flags, 0.04), (_validate_file, 0.03))


def generate(seed: int, n: int) -> list[Case]:
    """`n` cases from `seed` (the same seed, the same cases)."""
    rng = random.Random(seed)
    makers, weights = zip(*GENERATORS, strict=True)
    return [rng.choices(makers, weights)[0](rng) for _ in range(n)]


# --- running and classifying ----------------------------------------------------------------------------

def _bad_number(key: str, value: float) -> str | None:
    if not math.isfinite(value):
        return "nan_inf"
    k = key.lower()
    if re.search(r"(^|_)(mfu|hfu)(_|$)|fraction|attainment|stage_bubble_ratio", k) and not -1e-9 <= value <= 1 + 1e-9:
        return "impossible"
    if re.search(r"(_s|_ms|_gib|makespan|duration|span|_bytes)$", k) and value < 0:
        return "impossible"
    return None


def check_json(text: str) -> str | None:
    """None when `text` is strict JSON with plausible numbers, else the class of the first problem."""
    problems: list[str] = []

    def constant(name: str) -> float:
        problems.append("nan_inf")
        return 0.0

    try:
        doc = json.loads(text, parse_constant=constant)
    except ValueError:
        return "nan_inf" if re.search(r"\b(NaN|-?Infinity)\b", text) else None
    if problems:
        return problems[0]

    def walk(node: Any, key: str = "") -> str | None:
        if isinstance(node, dict):
            for k, v in node.items():
                found = walk(v, str(k))
                if found:
                    return found
        elif isinstance(node, list):
            for v in node:
                found = walk(v, key)
                if found:
                    return found
        elif isinstance(node, float | int) and not isinstance(node, bool):
            return _bad_number(key, float(node))
        return None

    return walk(doc)


def classify(status: int | None, out: str, err: str) -> str:
    """The outcome class of a finished run (see the module docstring)."""
    if status not in (0, 2) or "Traceback" in err:
        return "traceback"
    if status == 2:
        lines = err.strip().splitlines()
        ok = len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) <= MAX_ERROR_CHARS
        return "clean_error" if ok else "messy_error"
    text = out.strip()
    if text.startswith(("{", "[")):
        return check_json(text) or "answer"
    if re.search(r"\bnan\b", text, re.IGNORECASE):
        return "nan_inf"
    return "answer"


def run_case(case: Case, folder: Path) -> tuple[str, str]:
    """Write the case's files into `folder`, run the CLI in-process there; (class, detail)."""
    from shardwise.cli.main import main

    folder.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = main(list(case.argv))
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # the point is to catch what escapes
                if isinstance(exc, KeyboardInterrupt):
                    raise
                return "traceback", f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        os.chdir(cwd)
    cls = classify(status, out.getvalue(), err.getvalue())
    detail = err.getvalue().strip()[:300] if cls != "answer" else ""
    if cls in ("nan_inf", "impossible"):
        detail = out.getvalue()[:300]
    return cls, detail
