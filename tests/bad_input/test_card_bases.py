"""An exported folder is the model its card names: its base and its weights are checked against the card before
anything is scored.

The attacks tamper with a copy of a real export (conftest.py) the way a folder passed from hand to hand can be
changed: the card's `base_model` edited to claim another base, a shipped base (`base/<name>`) swapped or edited
after export, the card's record of that base's SHA-256 removed, and weight files that belong to another model (a
tensor dropped, one added, one of another shape). Before this check each of these loaded and was scored under the
card's name and numbers; each must now be refused in one line naming the file and what does not match.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from crossmod.artifacts.bases import BaseModelError
from crossmod.artifacts.consolidate import WeightsMismatch
from crossmod.artifacts.loading import load


def _card(folder: Path) -> dict:
    return json.loads((folder / "culture_card.json").read_text())


def _shipped(folder: Path) -> Path:
    (entry,) = [e for e in _card(folder)["base_provenance"] if e["named"].startswith("./base/")][:1]
    return folder / entry["named"].removeprefix("./")


def test_the_untouched_copy_loads(culture_copy):
    model, card = load(culture_copy)
    assert card["card"]["culture"] == "US" and _card(culture_copy)["base_provenance"]


def test_a_card_naming_another_base_is_refused(culture_copy):
    card = _card(culture_copy)
    (culture_copy / "culture_card.json").write_text(json.dumps({**card, "base_model": "Qwen/Qwen2-VL-72B-Instruct"}))
    with pytest.raises(BaseModelError, match=r"culture_card.json: base_model is 'Qwen/Qwen2-VL-72B-Instruct', but .*model_config.json builds"):
        load(culture_copy)


@pytest.mark.parametrize("change", ["edited", "added", "removed"])
def test_a_shipped_base_changed_after_export_is_refused(culture_copy, change):
    base = _shipped(culture_copy)
    config = base / "config.json"
    if change == "edited":
        values = json.loads(config.read_text())
        config.write_text(json.dumps({**values, "layer_norm_eps": 0.5}))  # still loads, but scores another model
    elif change == "added":
        (base / "extra.safetensors").write_bytes((culture_copy / "head.safetensors").read_bytes())
    else:
        next(p for p in sorted(base.rglob("*")) if p.is_file() and p.name != "config.json").unlink()
    with pytest.raises(BaseModelError, match=rf"{base}: its files' SHA-256 begins [0-9a-f]{{12}}, not the [0-9a-f]{{12}} that culture_card.json"):
        load(culture_copy)


def test_a_shipped_base_without_its_recorded_hash_is_refused(culture_copy):
    card = _card(culture_copy)
    card["base_provenance"] = [{k: v for k, v in e.items() if k != "sha256"} for e in card["base_provenance"]]
    (culture_copy / "culture_card.json").write_text(json.dumps(card))
    with pytest.raises(BaseModelError, match=r"base_provenance for \./base/\S+ has no SHA-256 of its files"):
        load(culture_copy)


@pytest.mark.parametrize("shape", ["not_a_list", "a_list_of_strings"])
def test_a_provenance_of_the_wrong_shape_is_named(culture_copy, shape):
    card = _card(culture_copy)
    card["base_provenance"] = "./base/x" if shape == "not_a_list" else ["./base/x"]
    (culture_copy / "culture_card.json").write_text(json.dumps(card))
    with pytest.raises(BaseModelError, match=r"culture_card.json: base_provenance is not a list of objects"):
        load(culture_copy)


@pytest.mark.parametrize("file", ["model.safetensors", "head.safetensors"])
@pytest.mark.parametrize("change", ["dropped", "added", "reshaped"])
def test_weights_of_another_model_are_refused_by_name(culture_copy, file, change):
    path = culture_copy / file
    state = load_file(str(path))
    name = sorted(state)[0]
    if change == "dropped":
        state.pop(name)
        said = rf"lacks {name}"
    elif change == "added":
        state["backbone.planted.weight"] = state[name].clone()
        said = r"holds weights the model lacks: backbone.planted.weight"
    else:
        state[name] = state[name].flatten()[:-1].clone() if state[name].numel() > 1 else state[name].repeat(2)
        said = rf"other shapes: {name} \("
    save_file(state, str(path))
    with pytest.raises(WeightsMismatch, match=rf"{file}: does not fit the base .* its card names: it .*{said}"):
        load(culture_copy)


@pytest.mark.parametrize("temperature", [0, -1.5, "2", float("nan"), True])
def test_a_card_temperature_that_cannot_be_one_is_refused(culture_copy, temperature):
    """predict divides every logit by the card's temperature: one that is not a number above 0 is named, not used."""
    card = _card(culture_copy)
    (culture_copy / "culture_card.json").write_text(json.dumps({**card, "calibration": {"temperature": temperature}}))
    with pytest.raises(ValueError, match=r"culture_card.json: calibration.temperature is .*, not a number above 0"):
        load(culture_copy)


@pytest.mark.parametrize(
    ("calibrator", "said"),
    [
        ({"method": "sigmoid"}, r"method is .sigmoid., not one of"),
        ({"method": "platt", "slope": "1", "intercept": 0.0}, r"slope is .1., not a finite number"),
        ({"method": "platt", "slope": float("inf"), "intercept": 0.0}, r"slope is inf"),
        ({"method": "isotonic", "knots_in": [0.2, 0.1], "knots_out": [0.0, 1.0]}, r"each non-decreasing"),
        ({"method": "isotonic", "knots_in": [0.1], "knots_out": [2.0]}, r"numbers in \[0, 1\]"),
        ({"method": "isotonic", "knots_in": [0.1, 0.2], "knots_out": [0.5]}, r"two lists of one length"),
        ("temperature", r"method is .temperature."),
    ],
)
def test_a_card_calibration_map_that_cannot_map_is_refused(culture_copy, calibrator, said):
    """predict maps every probability through the card's calibrator: one it cannot apply as written is named, not used."""
    card = _card(culture_copy)
    calibration = {"temperature": 1.0, "calibrator": calibrator}
    (culture_copy / "culture_card.json").write_text(json.dumps({**card, "calibration": calibration}))
    with pytest.raises(ValueError, match=rf"culture_card.json: calibration.calibrator.*{said}"):
        load(culture_copy)


@pytest.mark.parametrize("actions", [{"act": {"threshold": 2.0}}, {"remove": {"threshold": 0.5}}, {"act": {}}, "act"])
def test_a_card_policy_that_cannot_decide_is_refused(culture_copy, actions):
    """predict acts on a card's policy thresholds: one outside [0, 1], an unknown action or none at all is named."""
    card = _card(culture_copy)
    (culture_copy / "culture_card.json").write_text(json.dumps({**card, "policy": {"name": "p", "actions": actions}}))
    with pytest.raises(ValueError, match=r"culture_card.json: policy"):
        load(culture_copy)
