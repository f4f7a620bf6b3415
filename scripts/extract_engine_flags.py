"""Extract an engine's command-line flag table into ``src/shardwise/data/engines/<engine>.json``, so the
tests can check every exported flag without the engine installed.

    python scripts/extract_engine_flags.py megatron /path/to/Megatron-LM        # Megatron's own parser
    python scripts/extract_engine_flags.py vllm vllm-0.33.0-*.whl                 # source of a pinned wheel
    python scripts/extract_engine_flags.py sglang sglang-0.5.23-*.whl
    python scripts/extract_engine_flags.py vllm-router vllm_router-0.1.17-*.whl   # P/D routers
    python scripts/extract_engine_flags.py sglang-router sglang_router-0.3.2-*.whl

Megatron-LM: the table is read off the real ``argparse`` parser that ``add_megatron_arguments`` builds
(every option string, whether it takes a value, its choices). vLLM and SGLang are too heavy to import
on a CPU machine without their GPU dependencies, so their pinned wheels' source is read with ``ast``:
vLLM's ``EngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``: the option strings of every
``add_argument`` call; boolean fields also get ``--no-`` forms, argparse's BooleanOptionalAction) and
SGLang's declarative server fields (``sglang/srt/arg_groups/fields/*.py``: each annotated field
``name: A[type, ...]`` is ``--name`` with dashes, plus its ``aliases``; ``bool`` fields are switches).
vLLM's table also holds its OpenAI server's options: the fields of ``FrontendArgs`` and
``BaseFrontendArgs`` (``vllm/entrypoints/common/cli_args.py``, registered the same way as the engine's)
and the ``add_argument`` calls of ``vllm/entrypoints/cli/serve.py`` (--headless, --api-server-count).
The prefill/decode routers (vllm-router, sglang-router) are read off their real parsers: their
``router_args.py`` is plain argparse, run from the wheel (SGLang's native helper stubbed out).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "shardwise" / "data" / "engines"


def megatron(checkout: str) -> dict:
    import subprocess
    import typing

    if not hasattr(typing, "override"):  # Megatron-LM asks for Python >= 3.12 for this name only
        import typing_extensions

        typing.override = typing_extensions.override
    sys.path.insert(0, checkout)
    from megatron.core.package_info import __version__
    from megatron.training.arguments import add_megatron_arguments

    parser = add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    flags = {}
    for act in parser._actions:
        for opt in act.option_strings:
            flags[opt] = {"takes_value": act.nargs != 0, "choices": list(map(str, act.choices)) if act.choices else None}
    commit = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"engine": "megatron-lm", "version": __version__, "commit": commit or None,
            "source": "megatron/training/arguments.py add_megatron_arguments (real parser)", "flags": flags}


def _wheel_sources(wheel: str, pattern: str) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n).decode() for n in z.namelist() if re.fullmatch(pattern, n)}


def _version(wheel: str) -> str:
    return Path(wheel).name.split("-")[1]


def _dataclass_flags(tree: ast.AST, classes: tuple[str, ...]) -> dict:
    """--field-name of every annotated field of `classes` (bool fields: switches with --no- forms)."""
    flags = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for f in node.body:
                if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name):
                    opt = "--" + f.target.id.replace("_", "-")
                    switch = ast.unparse(f.annotation) == "bool"
                    flags[opt] = {"takes_value": not switch, "choices": None}
                    if switch:
                        flags["--no-" + opt[2:]] = {"takes_value": False, "choices": None}
    return flags


def _add_argument_flags(tree: ast.AST, bool_fields: set[str] | None = None) -> dict:
    """The option strings of every literal ``add_argument`` call (store_true actions take no value)."""
    flags = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            opts = [a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("-")]
            action = next((k.value.value for k in node.keywords if k.arg == "action" and isinstance(k.value, ast.Constant)), None)
            for opt in opts:
                field = opts[0].lstrip("-").replace("-", "_")
                switch = action in ("store_true", "store_false") or bool_fields is not None and field in bool_fields
                flags[opt] = {"takes_value": not switch, "choices": None}
                if bool_fields is not None and field in bool_fields and opt.startswith("--"):
                    flags["--no-" + opt[2:]] = {"takes_value": False, "choices": None}
    return flags


def vllm(wheel: str) -> dict:
    sources = _wheel_sources(wheel, r"vllm/engine/arg_utils\.py|vllm/entrypoints/common/cli_args\.py|vllm/entrypoints/cli/serve\.py")
    tree = ast.parse(sources["vllm/engine/arg_utils.py"])
    bool_fields = {n.target.id for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
                   and "bool" in ast.unparse(n.annotation)}
    flags = _add_argument_flags(tree, bool_fields)
    if "vllm/entrypoints/common/cli_args.py" in sources:
        flags.update(_dataclass_flags(ast.parse(sources["vllm/entrypoints/common/cli_args.py"]), ("FrontendArgs", "BaseFrontendArgs")))
    if "vllm/entrypoints/cli/serve.py" in sources:
        flags.update(_add_argument_flags(ast.parse(sources["vllm/entrypoints/cli/serve.py"])))
    return {"engine": "vllm", "version": _version(wheel),
            "source": "vllm/engine/arg_utils.py, vllm/entrypoints/common/cli_args.py, vllm/entrypoints/cli/serve.py (ast)",
            "flags": flags}


def router(wheel: str) -> dict:
    """A P/D router's flags from its real argparse parser (RouterArgs.add_cli_args in router_args.py)."""
    import types

    package = Path(wheel).name.split("-")[0]
    (name, text), = _wheel_sources(wheel, rf"{package}/router_args\.py").items()
    native = types.ModuleType(f"{package}.{package}_rs")  # SGLang's native helper, not needed for the flags
    native.get_available_tool_call_parsers = lambda: []
    sys.modules.setdefault(package, types.ModuleType(package))
    sys.modules[native.__name__] = native
    module = types.ModuleType(f"{package}.router_args")
    sys.modules[module.__name__] = module
    exec(compile(text, name, "exec"), module.__dict__)
    parser = argparse.ArgumentParser(allow_abbrev=False)
    module.RouterArgs.add_cli_args(parser)
    flags = {}
    for act in parser._actions:
        for opt in act.option_strings:
            flags[opt] = {"takes_value": act.nargs != 0, "choices": list(map(str, act.choices)) if act.choices else None}
    return {"engine": package.replace("_", "-"), "version": _version(wheel), "source": f"{name} RouterArgs.add_cli_args (real parser)",
            "flags": flags}


def sglang(wheel: str) -> dict:
    flags = {}
    for name, text in _wheel_sources(wheel, r"sglang/srt/arg_groups/fields/[a-z_]+\.py").items():
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", "") == "A"):
                continue
            parts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            switch = ast.unparse(parts[0]) == "bool"
            names = ["--" + node.target.id.replace("_", "-")]
            for call in (p for p in parts[1:] if isinstance(p, ast.Call)):
                for kw in call.keywords:
                    if kw.arg == "aliases" and isinstance(kw.value, ast.List):
                        names += [e.value for e in kw.value.elts if isinstance(e, ast.Constant)]
            for opt in names:
                flags[opt] = {"takes_value": not switch, "choices": None}
    return {"engine": "sglang", "version": _version(wheel), "source": "sglang/srt/arg_groups/fields/*.py (ast)",
            "flags": flags}


def main() -> None:
    engine, src = sys.argv[1], sys.argv[2]
    table = {"megatron": megatron, "vllm": vllm, "sglang": sglang, "vllm-router": router, "sglang-router": router}[engine](src)
    table["flags"] = dict(sorted(table["flags"].items()))
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{engine}.json"
    path.write_text(json.dumps(table, indent=0) + "\n")
    print(f"{engine} {table['version']}: {len(table['flags'])} flags -> {path}")


if __name__ == "__main__":
    main()
