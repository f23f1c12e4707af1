"""A retrieval adapter's database is data someone may have edited: every way it can be wrong is refused by name.

Each case writes a good database, breaks one thing (re-recording the checksums where the break is meant to get past
them), and expects `read_database` to name the file and what does not hold.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from crossmod.artifacts.retrieval_db import DB_FILE, IDS_FILE, Database, DatabaseError, read_database, run_training_memes, write_database
from crossmod.data.shards import sha256_file
from crossmod.models.trusted_targets import UntrustedConfigError


def _good(folder: Path) -> dict:
    folder.mkdir(exist_ok=True)
    database = Database(torch.randn(6, 4), torch.tensor([0, 1, 0, 1, 1, 0], dtype=torch.int8), [f"m/{n}" for n in range(6)])
    return write_database(folder, database)


def _resign(folder: Path, facts: dict) -> dict:
    facts["sha256"] = {name: sha256_file(folder / name) for name in (DB_FILE, IDS_FILE)}
    return facts


def _tensors(**change: torch.Tensor) -> Callable[[Path, dict], dict]:
    def breaks(folder: Path, facts: dict) -> dict:
        tensors = {"embeddings": torch.randn(6, 4), "labels": torch.tensor([0, 1, 0, 1, 1, 0], dtype=torch.int8), **change}
        save_file({k: v for k, v in tensors.items() if v is not None}, str(folder / DB_FILE))
        return _resign(folder, facts)

    return breaks


def _ids(value: object) -> Callable[[Path, dict], dict]:
    def breaks(folder: Path, facts: dict) -> dict:
        (folder / IDS_FILE).write_text(json.dumps(value))
        return _resign(folder, facts)

    return breaks


def _edited_byte(folder: Path, facts: dict) -> dict:
    data = bytearray((folder / DB_FILE).read_bytes())
    data[-1] ^= 0xFF
    (folder / DB_FILE).write_bytes(bytes(data))
    return facts


def _padded_ids(folder: Path, facts: dict) -> dict:
    """Valid JSON (whitespace is) far larger than six ids can take: refused from its size, before it is hashed or parsed."""
    (folder / IDS_FILE).write_text(json.dumps([f"m/{n}" for n in range(6)]) + " " * 400_000)
    return _resign(folder, facts)


def _link_out(folder: Path, facts: dict) -> dict:
    outside = folder.parent / "elsewhere.json"
    outside.write_text(json.dumps([f"m/{n}" for n in range(6)]))
    (folder / IDS_FILE).unlink()
    (folder / IDS_FILE).symlink_to(outside)
    return _resign(folder, facts)


NAN = torch.randn(6, 4)
NAN[2, 1] = float("nan")
CASES = {
    "an edited byte": (_edited_byte, "SHA-256 is not the one"),
    "a file linked from outside the folder": (_link_out, "outside"),
    "a non-finite embedding": (_tensors(embeddings=NAN), "row 2 is not finite"),
    "a zero embedding": (_tensors(embeddings=torch.zeros(6, 4)), "row 0 is not finite or is zero"),
    "a label that is not 0/1": (_tensors(labels=torch.tensor([0, 1, 2, 1, 1, 0], dtype=torch.int8)), "label row 2 is 2"),
    "half-precision embeddings": (_tensors(embeddings=torch.randn(6, 4).half()), "torch.float16"),
    "fewer rows than the card says": (_tensors(embeddings=torch.randn(5, 4)), "(5, 4)"),
    "an extra tensor": (_tensors(extra=torch.zeros(1)), "not exactly embeddings and labels"),
    "no labels": (_tensors(labels=None), "not exactly embeddings and labels"),
    "ids that repeat": (_ids(["m/0", "m/1", "m/2", "m/3", "m/4", "m/0"]), "id 'm/0' repeats"),
    "every embedding row the same": (_tensors(embeddings=torch.ones(6, 4)), "every embedding row is the same"),
    "an id that is not a string": (_ids(["m/0", "m/1", 2, "m/3", "m/4", "m/5"]), "id 2 is"),
    "an id with control characters": (_ids(["m/0", "m/1", "m/2\x1b[2J", "m/3", "m/4", "m/5"]), "id 2 is"),
    "too few ids": (_ids(["m/0"]), "a list of 6 ids"),
    "ids that are an object": (_ids({"m/0": 1}), "a list of 6 ids"),
    "an ids file larger than its ids can be": (_padded_ids, "more than 6 ids of at most 1000 characters take"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_broken_database_is_refused_naming_what(tmp_path, case):
    folder = tmp_path / "US"
    facts = _good(folder)
    read_database(folder, facts)  # the unbroken one loads
    breaks, message = CASES[case]
    facts = breaks(folder, facts)
    with pytest.raises(DatabaseError) as refused:
        read_database(folder, facts)
    assert message in str(refused.value)
    assert str(folder) in str(refused.value) or "culture_card.json" in str(refused.value)


@pytest.mark.parametrize(
    "facts", [None, {"size": 6, "dim": 4}, {"size": True, "dim": 4, "sha256": {}}, {"size": 6, "dim": -1, "sha256": {}}]
)
def test_a_card_without_usable_database_facts_is_refused(tmp_path, facts):
    _good(tmp_path / "US")
    with pytest.raises(DatabaseError, match="culture_card.json"):
        read_database(tmp_path / "US", facts)


def test_a_run_whose_data_config_names_code_is_refused_before_anything_is_built(tmp_path):
    """export.py kind=retrieval reads the run's training memes from the run's config.yaml: a shared run is data too."""
    config = {"data": {"_target_": "crossmod.data.memes.MemeDataModule", "source": {"_target_": "os.system", "command": "touch pwned"}}}
    with pytest.raises(UntrustedConfigError, match="os.system"):
        run_training_memes(tmp_path, config, model=None, culture="US")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    "ids, named",
    [
        (["m/0", "../../evil\nline"], "id 1 is '../../evil\\nline', not a printable string"),
        (["m/0", "x" * 2000], "not a printable string of 1–1000 characters"),
        (["m/0", "m/1", "m/0"], "id 'm/0' repeats"),
    ],
    ids=["a newline and a climb", "2000 characters", "a repeat within the shards"],
)
def test_add_checks_incoming_ids_by_the_load_rule_before_anything_is_written(ids, named):
    """What `retrieval_db add` reads from shards is checked by the rule every later load applies (check_ids), before
    anything is embedded or written: a database that no load would accept is never made."""
    from crossmod.artifacts.retrieval_db import check_ids

    with pytest.raises(DatabaseError, match=re.escape(named)):
        check_ids(ids, "shards")
