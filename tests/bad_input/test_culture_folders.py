"""An exported culture folder is read inside itself only, and its files are checked before they are used.

The attacks tamper with a copy of a real export (conftest.py): a file of the folder replaced by a symlink
to a file outside it (the card, the model config, the weights, an adapter file), whose content must be
neither read, printed nor loaded; a `culture_card.json` or `model_config.json` of the wrong type or
without the fields loading needs; a safetensors file whose header claims a huge length (a "header
bomb"). Each must be refused with one error naming the file (and the field), not followed, and not
an AttributeError, KeyError or a safetensors message without a file name.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from crossmod.artifacts.loading import load

STOLEN = "stolen-7c2e91"  # the outside file's distinctive content


@pytest.mark.parametrize(
    "name",
    ["culture_card.json", "model_config.json", "model.safetensors", "head.safetensors", "adapter_config.json", "adapter_model.safetensors"],
)
def test_a_symlink_out_of_the_folder_is_refused_and_not_followed(name, culture_copy, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    source = culture_copy / name if (culture_copy / name).exists() else culture_copy / "model.safetensors"
    target = outside / name
    shutil.copy(source, target)
    if name == "culture_card.json":  # a valid card, so that following it would load (and print) another culture
        card = json.loads(target.read_text())
        target.write_text(json.dumps({**card, "culture": STOLEN}))
    (culture_copy / name).unlink(missing_ok=True)
    (culture_copy / name).symlink_to(target)

    with pytest.raises(ValueError) as refused:
        load(culture_copy)

    message = str(refused.value)
    assert name in message and "outside" in message and str(culture_copy) in message, message
    assert STOLEN not in message


def _rewrite(path: Path, content: object) -> None:
    path.write_text(content if isinstance(content, str) else json.dumps(content))


def _card(folder: Path) -> dict:
    return json.loads((folder / "culture_card.json").read_text())


CARDS = {
    "not_json": ("{'culture': 'US',", r"culture_card.json: not JSON"),
    "a_list": (["US"], r"culture_card.json: .*an object"),
    "a_string": ('"US"', r"culture_card.json: .*an object"),
    "no_heads": ("drop:heads", r"culture_card.json: heads"),
    "heads_a_string": ("set:heads=US", r"culture_card.json: heads"),
    "no_format": ("drop:format", r"culture_card.json: format"),
    "unknown_format": ("set:format=pickle", r"culture_card.json: format"),
    "no_culture": ("drop:culture", r"culture_card.json: culture"),
}


@pytest.mark.parametrize("case", list(CARDS))
def test_a_culture_card_of_the_wrong_shape_is_named_with_its_field(case, culture_copy):
    change, expected = CARDS[case]
    card = _card(culture_copy)
    if isinstance(change, str) and change.startswith("drop:"):
        card.pop(change[5:])
        change = card
    elif isinstance(change, str) and change.startswith("set:"):
        key, value = change[4:].split("=")
        change = {**card, key: value}
    _rewrite(culture_copy / "culture_card.json", change)

    with pytest.raises(ValueError, match=expected) as refused:
        load(culture_copy)
    assert not isinstance(refused.value, (KeyError, AttributeError, TypeError))


@pytest.mark.parametrize("content", [["model"], "not json {", 3])
def test_a_model_config_that_is_not_an_object_is_named(content, culture_copy):
    _rewrite(culture_copy / "model_config.json", content if content != 3 else "3")
    with pytest.raises(ValueError, match=r"model_config.json: (not JSON|.*an object)"):
        load(culture_copy)


@pytest.mark.parametrize("name", ["model.safetensors", "head.safetensors"])
@pytest.mark.parametrize("length", [2**62, 90_000_000])
def test_a_safetensors_header_bomb_is_named(name, length, culture_copy):
    (culture_copy / name).write_bytes(struct.pack("<Q", length) + b'{"__metadata__": {}}')
    with pytest.raises(ValueError, match=rf"{name}: .*header"):
        load(culture_copy)
