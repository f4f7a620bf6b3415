"""Bad job files: one clear line naming the field, exit status 2, no traceback."""

import json
import textwrap

import pytest

from shardwise.cli.main import main

GOOD = {
    "model": "llama-3.1-70b",
    "cluster": {"gpu": "H100-SXM", "gpus": 64},
    "training": {"seq_len": 8192, "global_batch": 64},
    "parallel": {"tp": 8, "pp": 4},
}


def run(tmp_path, capsys, doc, suffix=".yaml"):
    path = tmp_path / f"job{suffix}"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    code = main(["train", "estimate", str(path), "--format", "json"])
    out = capsys.readouterr()
    return code, out.out, out.err


def patch(section, **fields):
    doc = json.loads(json.dumps(GOOD))
    if section is None:
        doc.update(fields)
    else:
        doc[section].update(fields)
    return doc


CASES = [
    (patch("cluster", gpu="V99"), "unknown GPU 'V99'"),
    (patch("parallel", tp=3), "parallel.tp: 3 does not divide the 64 attention heads"),
    (patch("cluster", gpus=60), "gpus (60) must be a multiple of gpus_per_node (8)"),
    (patch("cluster", gpus=48), "cluster.gpus: 48 is not divisible by tp*pp*cp"),
    (patch("parallel", dp=3), "parallel.dp"),
    (patch("parallel", tp=1, pp=64, vpp=2, schedule="interleaved"), "parallel.pp"),
    (patch("parallel", ep=2), "parallel.ep: 2 > 1 but"),
    ({**patch("parallel", tp=1, pp=1, cp=3), "cluster": {"gpu": "H100", "gpus": 48}}, "parallel.cp: 3 does not divide seq_len"),
    (patch("parallel", zero=5), "parallel.zero"),
    (patch("parallel", recompute="some"), "parallel.recompute"),
    (patch("parallel", schedule="wavy"), "unknown schedule"),
    (patch("parallel", micro_batch=0), "parallel.micro_batch"),
    (patch("parallel", tpp=2), "parallel.tpp: unknown field"),
    (patch("training", seq_len=-1), "training.seq_len"),
    (patch("training", global_batch=51), "training.global_batch: 51 is not a multiple"),
    (patch("training", precision="int3"), "training.precision"),
    (patch("cluster", network={"nics": 8}), "cluster.network.nics: unknown field"),
    (patch("cluster", network={"nic_gbps": -1}), "cluster.network.nic_gbps"),
    (patch("cluster", network={"fabric": "myrinet"}), "cluster.network.fabric"),
    ({**GOOD, "cluster": {"gpu": "A100", "gpus": 64, "network": {"nvls": True}}}, "cluster.network.nvls: A100-80GB has no NVLink SHARP"),
    (patch("cluster", power_limit_w=900), "cluster.power_limit_w: 900 W exceeds the 700 W board power"),
    (patch(None, model="gpt-9"), "unknown model 'gpt-9'"),
    (patch(None, model={"layers": 2, "hidden": 64}), "heads"),
    (patch(None, extra={}), "unknown section"),
    ({k: v for k, v in GOOD.items() if k != "cluster"}, "missing 'cluster'"),
    ([], "empty list"),
    ("model: [unclosed\n", "malformed YAML at line"),
    ("just a string", "a job must be a mapping"),
]


@pytest.mark.parametrize("doc,fragment", CASES)
def test_bad_input_one_line_error(tmp_path, capsys, doc, fragment):
    code, out, err = run(tmp_path, capsys, doc)
    assert code == 2 and out == ""
    assert fragment in err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err


def test_malformed_json_and_missing_file(tmp_path, capsys):
    code, _, err = run(tmp_path, capsys, '{"model": ', suffix=".json")
    assert code == 2 and "malformed JSON at line 1" in err
    assert main(["train", "estimate", str(tmp_path / "nope.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_broken_config_json_model(tmp_path, capsys, data_dir):
    code, _, err = run(tmp_path, capsys, patch(None, model=str(data_dir / "hf" / "broken.json")))
    assert code == 2 and "malformed JSON" in err


def test_list_of_jobs_and_config_json_model(tmp_path, capsys, data_dir):
    second = patch(None, model=str(data_dir / "hf" / "llama-3.1-8b.json"))
    second["parallel"] = {"tp": 8, "pp": 1}
    code, out, _ = run(tmp_path, capsys, textwrap.dedent(json.dumps([GOOD, second])), suffix=".json")
    assert code == 0
    results = json.loads(out)
    assert len(results) == 2 and results[1]["model"].endswith("hf")
