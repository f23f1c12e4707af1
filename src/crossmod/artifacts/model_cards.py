"""What a model folder's card (README.md) says of the model: the name it gives itself and the languages it declares.

Read as data from a folder someone shared: size-capped, YAML front matter through `yaml.safe_load`, never loaded as
code. The packaged all-MiniLM-L6-v2 (folder `model`) calls itself `all-MiniLM-L6-v2` and declares `language: en`.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

MAX_CARD_BYTES = 1 << 20  # a model card is a few kB: a larger README is not read
NAME = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # a model name (`name` or `owner/name`), no spaces


def _lines(folder: Path) -> list[str]:
    path = Path(folder) / "README.md"
    try:
        if not path.is_file() or path.stat().st_size > MAX_CARD_BYTES:
            return []
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _front_matter_end(lines: list[str]) -> int:
    """The index after the YAML front matter (`---` … `---` at the top), 0 without one."""
    return lines.index("---", 1) + 1 if lines[:1] == ["---"] and "---" in lines[1:] else 0


def card_title(folder: Path) -> str | None:
    """The card's first `# ` heading outside the front matter and code blocks, when it is a model name."""
    lines = _lines(folder)
    fenced = False
    for line in lines[_front_matter_end(lines) :]:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            title = line[2:].strip()
            return title if NAME.match(title) else None
    return None


def card_languages(folder: Path) -> list[str] | None:
    """The ISO codes the card's front matter declares (`language: en` or a list); None where it declares none (or
    `multilingual`, which names no language)."""
    lines = _lines(folder)
    end = _front_matter_end(lines)
    if not end:
        return None
    try:
        meta = yaml.safe_load("\n".join(lines[1 : end - 1]))
    except yaml.YAMLError:
        return None
    declared = meta.get("language") if isinstance(meta, dict) else None
    codes = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    codes = [c.strip().lower() for c in codes if isinstance(c, str) and c.strip() and c.strip().lower() != "multilingual"]
    return codes or None
