"""Every constant the code calls `# fitted` is a parameter of one of the fits (training: calibration/fit.PARAMS,
network: cost/comm_fit.PARAMS, serving: calibration/serving_fit.PARAMS): a tag cannot claim a fit that never
ran. A field is tagged by a comment on its line, or by a comment line just above it that starts with `# fitted`."""

import ast
import re
from pathlib import Path

from shardwise.calibration import fit, serving_fit
from shardwise.cost import comm_fit

SRC = Path(__file__).resolve().parents[2] / "src" / "shardwise"
FILES = [SRC / "cost" / "constants.py", SRC / "serve" / "constants.py"]


def _tagged_fields(path: Path) -> list[tuple[str, str]]:
    lines = path.read_text().splitlines()
    out = []
    for cls in ast.parse(path.read_text()).body:
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            own = lines[node.lineno - 1]
            above = [ln.strip() for ln in lines[max(0, node.lineno - 6):node.lineno - 1]]
            block = next((i for i in range(len(above) - 1, -1, -1) if not above[i].startswith("#")), -1)
            comments = above[block + 1:]
            tag = re.search(r"#\s*fitted\b", own) or (comments and comments[0].startswith("# fitted"))
            if tag and "assumed" not in own.split("#", 1)[-1].split(";")[0].split("fitted")[0]:
                out.append((cls.name, node.target.id))
    return out


def _fitted_names() -> set[str]:
    names = {path.rsplit(".", 1)[-1] for p in fit.PARAMS for path in p.targets}
    names |= {name for name, *_ in comm_fit.PARAMS}
    names |= {name.rsplit(".", 1)[-1] for name, *_ in serving_fit.PARAMS}
    return names


def test_the_tag_reader_finds_the_tagged_fields():
    tagged = {f for _, f in _tagged_fields(FILES[0])}
    assert {"gemm_efficiency", "a2a_peer_latency_s", "host_adam_bytes_s"} <= tagged
    assert "cuda_context_gib" not in tagged  # assumed


def test_every_fitted_tag_has_a_fit_parameter():
    fitted = _fitted_names()
    missing = [f"{cls}.{name}" for path in FILES for cls, name in _tagged_fields(path) if name not in fitted]
    assert not missing, f"tagged '# fitted' but no fit has them as a parameter: {missing}"


def test_every_fit_parameter_says_fitted_where_it_is_declared():
    """The reverse: a constant a fit sets is not described as cited or assumed where it is declared."""
    text = FILES[0].read_text().splitlines()
    declared = {}
    for ln in text:
        m = re.match(r"\s+(\w+): float = [^#]*#\s*(.*)", ln)
        if m:
            declared.setdefault(m.group(1), m.group(2))
    sections = ("compute.", "fusion.", "step.", "lowp.", "moe.", "memory.", "per_gpu.")
    fields = {t.rsplit(".", 1)[-1] for p in fit.PARAMS for t in p.targets if t.startswith(sections)}
    fields |= {name for name, *_ in comm_fit.PARAMS}
    wrong = {f: declared[f] for f in fields if f in declared and "fitted" not in declared[f]}
    assert not wrong, f"fitted by a fit script but not tagged fitted: {wrong}"
