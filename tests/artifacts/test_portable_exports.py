"""Exports load on another machine: bases named by hub id or shipped inside (relative), never by this machine's path.

One tiny concat run trains on a text encoder in its own folder; it is exported twice (base shipped, and
`ship_base_mb=0`: named only), then that folder is moved away and the exports are copied elsewhere, as
a fresh machine would see them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from crossmod.artifacts.bases import BaseModelError, absolute_paths, folder_sha256
from crossmod.artifacts.loading import load
from crossmod.runtime.resolvers import tiny_text_encoder
from tests.artifacts.test_export_predict import _scores, _shard_dir
from tests.conftest import ROOT, SMALL_DATA, TrainRun, scaled
from tests.zygote import run_python

DECLARED = "nreimers/MiniLM-L6-H384-uncased"
TITLE = "tiny-sentence-bert"  # what the folder's model card calls it (the packaged all-MiniLM-L6-v2's folder is `model`)
CARD = f"---\nlicense: apache-2.0\n---\n\n```python\n# a comment, not a title\n```\n\n# {TITLE}\n\n## Usage\n"
OFFLINE = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # nothing may come from the hub instead


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    return run_python(
        [sys.executable, str(ROOT / script), *args], cwd=ROOT, env=OFFLINE, capture_output=True, text=True, timeout=scaled(600)
    )


@pytest.fixture(scope="module")
def moved(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The run (its base moved away after export) and its two exports, copied to a folder of their own."""
    root = tmp_path_factory.mktemp("portable")
    base = tiny_text_encoder(str(root / "machine" / "my-bert"))
    # like the all-MiniLM-L6-v2 package folder, whose config names the model it was made from, not itself
    config = json.loads((Path(base) / "config.json").read_text())
    (Path(base) / "config.json").write_text(json.dumps({**config, "_name_or_path": DECLARED}))
    (Path(base) / "README.md").write_text(CARD)
    sha256 = folder_sha256(Path(base))
    runner = TrainRun(data_dir, root / "runs")
    runner(*SMALL_DATA, "debug=limit", f"model.text.name_or_path={base}", env={"CROSSMOD_RUN_ID": "portable"})
    run = runner.log_dir / "synthetic_concat" / "runs" / "portable"
    for name, extra in (("shipped", []), ("named", ["ship_base_mb=0"])):
        result = _run("export.py", f"run={run}", "culture=MX", f"out={root / name}", *extra)
        assert result.returncode == 0, result.stderr[-4000:]
    (root / "machine").rename(root / "moved")  # the training machine's base is gone from where it was
    copies = {name: Path(shutil.copytree(root / name / "MX", root / "elsewhere" / name)) for name in ("shipped", "named")}
    return {"run": run, "base": root / "moved" / "my-bert", "sha256": sha256, "data_dir": data_dir, **copies}


def _string_values(node: object) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in _string_values(value)]
    if isinstance(node, list):
        return [s for value in node for s in _string_values(value)]
    return [node] if isinstance(node, str) else []


def test_no_exported_file_names_a_path_of_the_training_machine(moved):
    """culture_card.json, model_config.json and the README: the run by its id, the checkpoint within the run, the
    training config's folders by their last part."""
    machine = str(moved["base"].parents[1])
    for name in ("shipped", "named"):
        card = json.loads((moved[name] / "culture_card.json").read_text())
        assert absolute_paths(card) == [] and card["run"] == "portable" and card["checkpoint"].startswith("checkpoints/")
        assert card["training_config"]["paths"]["log_dir"].startswith("<training machine>/")
        for path in moved[name].rglob("*"):
            if path.is_file() and path.suffix in (".json", ".md", ".yaml", ".txt"):
                assert machine not in path.read_text(), f"{path.relative_to(moved[name])} names {machine}"


def test_the_readme_is_a_model_card_naming_data_split_rule_base_and_held_out_numbers_beside_baselines(moved):
    card = json.loads((moved["named"] / "culture_card.json").read_text())
    readme = (moved["named"] / "README.md").read_text()
    front, body = readme.split("---\n")[1], readme.split("---\n", 2)[2]
    assert '"crossmod"' in front and '"culture-MX"' in front and "base_model" not in front  # a local base is no hub id
    trained = card["trained_on"]
    assert f"- dataset: `{trained['dataset']}` (fingerprint `{trained['fingerprint']}`)" in body
    assert f"- selection rule: `{trained['selection_rule']}`" in body and trained["selection_rule"]
    assert f"`{TITLE}@sha256:{moved['sha256'][:12]}`" in body and f"content SHA-256 `{moved['sha256']}`" in body
    assert "revision None" not in readme and "revision `None`" not in readme
    test = card["metrics"]["test"]
    row = next(line for line in body.splitlines() if line.startswith("| test | "))
    assert f" {test['acc']:.4f} " in row and f" {test['auroc']:.4f} " in row
    majority = card["baselines"]["majority"]["test"]
    assert majority and f"| test, majority | {majority['acc']:.4f} |" in body, body
    assert "test = the held-out memes" in body


def test_model_config_names_no_absolute_path(moved):
    for name in ("shipped", "named"):
        config = json.loads((moved[name] / "model_config.json").read_text())
        strings = _string_values(config)
        leaks = [s for s in strings if os.path.isabs(s) or s.startswith("~") or str(moved["base"].parents[1]) in s]
        assert len(strings) > 10 and not leaks, f"{name}: {leaks}"
        assert absolute_paths(config) == []
    shipped = json.loads((moved["shipped"] / "model_config.json").read_text())
    assert shipped["text"]["name_or_path"] == shipped["preprocessor"]["tokenizer"] == "./base/my-bert"
    assert (moved["shipped"] / "base" / "my-bert" / "config.json").is_file()
    assert json.loads((moved["shipped"] / "culture_card.json").read_text())["base_model"] == "./base/my-bert"
    named = json.loads((moved["named"] / "model_config.json").read_text())
    assert named["text"]["name_or_path"] == f"{TITLE}@sha256:{moved['sha256'][:12]}" and sorted(named["local_bases"]) == [
        "preprocessor.tokenizer",
        "text.name_or_path",
    ]
    assert not (moved["named"] / "base").exists()


def test_shipped_base_predicts_the_runs_scores_from_a_copy(moved, tmp_path):
    result = _run("predict.py", f"adapters={moved['shipped']}", f"inputs={_shard_dir(moved['run'])}", f"out={tmp_path / 'p.csv'}")
    assert result.returncode == 0, result.stderr[-4000:]
    tested = _scores(moved["run"] / "predictions" / "test.csv", "MX")
    predicted = _scores(tmp_path / "p.csv", "MX", "MX_probability")
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())


def test_unshipped_base_names_the_key_and_the_override_gives_it(moved, tmp_path):
    args = [f"adapters={moved['named']}", f"inputs={_shard_dir(moved['run'])}", f"out={tmp_path / 'p.csv'}"]
    failed = _run("predict.py", *args)
    assert failed.returncode == 1 and not (tmp_path / "p.csv").exists()
    recorded = f"{TITLE}@sha256:{moved['sha256'][:12]}"
    assert f"text.name_or_path names '{recorded}', a folder of the machine that trained this export" in failed.stderr
    assert "model.text.name_or_path=<local copy>" in failed.stderr and "Traceback" not in failed.stderr

    given = _run("predict.py", *args, f"model.text.name_or_path={moved['base']}")
    assert given.returncode == 0, given.stderr[-4000:]
    tested = _scores(moved["run"] / "predictions" / "test.csv", "MX")
    predicted = _scores(tmp_path / "p.csv", "MX", "MX_probability")
    assert tested and all(predicted[i] == pytest.approx(p, abs=1e-5) for i, p in tested.items())
    with pytest.raises(BaseModelError, match=r"model.name_or_path: .* names no base there \(its base keys: model.text.name_or_path\)"):
        load(moved["named"], bases={"name_or_path": str(moved["base"])})


def test_the_card_names_a_local_base_by_its_folder_and_content_never_by_a_guessed_hub_id(moved):
    """Shipped, a base is its path inside the export; named only, it is what its model card calls it plus a prefix of
    its content's SHA-256 (its config's `_name_or_path` names the model it was made from, so it is never the name)."""
    expected = {"shipped": "./base/my-bert", "named": f"{TITLE}@sha256:{moved['sha256'][:12]}"}
    for name in ("shipped", "named"):
        card = json.loads((moved[name] / "culture_card.json").read_text())
        assert DECLARED not in json.dumps(card["base_model"]) and card["base_model"] == expected[name]
        assert f"base model: `{expected[name]}`" in (moved[name] / "README.md").read_text()
        (provenance,) = card["base_provenance"]
        assert provenance["folder"] == "my-bert" and provenance["declares"] == DECLARED  # recorded as what it says it is
        assert provenance["title"] == TITLE and provenance["named"] == expected[name]
        assert provenance["sha256"] == moved["sha256"] == folder_sha256(moved["base"])  # the moved copy is the same base
        assert sorted(provenance["keys"]) == ["preprocessor.tokenizer", "text.name_or_path"]
    assert folder_sha256(moved["shipped"] / "base" / "my-bert") == moved["sha256"]  # what was shipped is what trained


def test_every_job_takes_the_same_base_override_and_names_its_own_command(moved, tmp_path):
    """predict.py (above), evaluate.py, export.py and `retrieval_db add`: the base the run read is gone from where it
    was; each job says so with its own command and `model.text.name_or_path=<local copy>`, and runs when given it."""
    give = f"model.text.name_or_path={moved['base']}"
    data = [f"paths.data_dir={moved['data_dir']}", *SMALL_DATA]
    for job, command in (
        (["evaluate.py", f"ckpt={moved['named']}", *data, f"out={tmp_path / 'report'}"], f"crossmod evaluate ckpt={moved['named']}"),
        (["export.py", f"run={moved['run']}", "culture=MX", "kind=retrieval", "ship_base_mb=0", f"out={tmp_path / 'export'}"],
         f"crossmod export run={moved['run']}"),
    ):  # fmt: skip
        failed = _run(*job)
        assert failed.returncode == 1 and "Traceback" not in failed.stderr, failed.stderr[-3000:]
        assert f"{command} model.text.name_or_path=<local copy>" in failed.stderr, failed.stderr[-3000:]
        given = _run(*job, give)
        assert given.returncode == 0, given.stderr[-3000:]
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    (entry,) = report["runs"].values()
    assert entry["metrics"]["MX"]["auroc"] == pytest.approx(
        json.loads((moved["run"] / "metrics.json").read_text())["best"]["test"]["MX"]["auroc"], abs=1e-5
    )
    adapter, shards = tmp_path / "export" / "MX", _shard_dir(moved["run"])
    add = [
        sys.executable,
        "-m",
        "crossmod.recipes.retrieval_db",
        f"adapter={adapter}",
        f"shards={shards}",
        "splits=[test]",
        "allow_held_out=true",
    ]
    failed = run_python(add, cwd=ROOT, env=OFFLINE, capture_output=True, text=True, timeout=scaled(600))
    assert (
        failed.returncode == 1
        and f"crossmod retrieval-db adapter={adapter} shards={shards} model.text.name_or_path=<local copy>" in failed.stderr
    )
    given = run_python([*add, give], cwd=ROOT, env=OFFLINE, capture_output=True, text=True, timeout=scaled(600))
    assert given.returncode == 0 and " added" in given.stdout, given.stderr[-3000:]


def _tamper(folder: Path, key: str, value: str) -> None:
    config = json.loads((folder / "model_config.json").read_text())
    config["text"][key] = config["preprocessor"]["tokenizer"] = value
    (folder / "model_config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("value", "refused"),
    [
        ("./base/../../../moved/my-bert", "leads out of the exported folder"),
        ("./base/link", "leads out of the exported folder"),  # a symlink to the base outside
        ("/abs/my-bert", "is neither a hub id nor a path inside the exported folder"),
        ("../moved/my-bert", "is neither a hub id nor a path inside the exported folder"),
        ("./base/gone", "is not in the exported folder"),
    ],
)
def test_paths_in_an_exported_folder_stay_inside_it(moved, tmp_path, value, refused):
    folder = Path(shutil.copytree(moved["shipped"], tmp_path / "MX"))
    (folder / "base" / "link").symlink_to(moved["base"], target_is_directory=True)
    _tamper(folder, "name_or_path", value)
    with pytest.raises(BaseModelError, match=refused):
        load(folder)
    model, _ = load(folder, bases={"text.name_or_path": str(moved["base"])})  # the user's own path is followed
    assert model.hparams.text["name_or_path"] == model.hparams.preprocessor["tokenizer"] == str(moved["base"])


def test_a_shipped_base_whose_files_link_out_is_refused(moved, tmp_path):
    folder = Path(shutil.copytree(moved["shipped"], tmp_path / "MX"))
    (folder / "base" / "my-bert" / "config.json").unlink()
    (folder / "base" / "my-bert" / "config.json").symlink_to(moved["base"] / "config.json")
    with pytest.raises(BaseModelError, match=r"text.name_or_path='./base/my-bert' leads out of the exported folder"):
        load(folder)


def test_a_hub_base_out_of_reach_names_the_override(moved, tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # offline, and the id is in no cache
    folder = Path(shutil.copytree(moved["shipped"], tmp_path / "MX"))
    _tamper(folder, "name_or_path", "crossmod-tests/not-a-model")
    card = json.loads((folder / "culture_card.json").read_text())  # an export whose base is a hub id names it in its card
    (folder / "culture_card.json").write_text(json.dumps({**card, "base_model": "crossmod-tests/not-a-model"}))
    with pytest.raises(BaseModelError, match=r"(?s)cannot load its base model .* model.text.name_or_path=<local copy>"):
        load(folder)


def test_a_given_copy_that_is_not_the_recorded_base_is_said_before_scoring(moved, tmp_path, caplog):
    """The named base carries its content's hash: the same copy loads silently, an altered one (another version of the
    model) is named with both hashes."""
    with caplog.at_level("WARNING", logger="crossmod.artifacts.bases"):
        load(moved["named"], bases={"text.name_or_path": str(moved["base"])})
    assert "is not the base this export was trained on" not in caplog.text
    altered = Path(shutil.copytree(moved["base"], tmp_path / "my-bert"))
    (altered / "README.md").write_text(CARD + "another revision\n")
    with caplog.at_level("WARNING", logger="crossmod.artifacts.bases"):
        load(moved["named"], bases={"text.name_or_path": str(altered)})
    assert "is not the base this export was trained on" in caplog.text and folder_sha256(altered)[:12] in caplog.text
