"""One entry for every tiny VLM checkpoint kind (a Transformers `model_type`): which builder writes it.

`${tiny_vlm:<folder>,<kind>}` in a model config (src/crossmod/runtime/resolvers.py) builds the folder on first use,
so `model=vlm model.name_or_path=${tiny_vlm:…,gemma3}` runs any family on the synthetic memes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from crossmod.models.tiny.gemma3 import build_tiny_gemma3
from crossmod.models.tiny.idefics3 import build_tiny_idefics3
from crossmod.models.tiny.internvl import build_tiny_internvl
from crossmod.models.tiny.llava_onevision import build_tiny_llava_onevision
from crossmod.models.tiny.qwen3_vl import build_tiny_qwen3_vl
from crossmod.models.tiny.qwen_vl import build_tiny_qwen_vl

BUILDERS: dict[str, Callable[..., Path]] = {
    "qwen2_vl": partial(build_tiny_qwen_vl, version="qwen2_vl"),
    "qwen2_5_vl": partial(build_tiny_qwen_vl, version="qwen2_5_vl"),
    "qwen3_vl": build_tiny_qwen3_vl,
    "llava_onevision": build_tiny_llava_onevision,
    "internvl": build_tiny_internvl,
    "idefics3": partial(build_tiny_idefics3, version="idefics3"),
    "smolvlm": partial(build_tiny_idefics3, version="smolvlm"),
    "gemma3": build_tiny_gemma3,
}


def build_tiny_vlm(out_dir: str | Path, corpus: list[str], kind: str = "qwen2_vl") -> Path:
    """A tiny random checkpoint folder of `kind` whose tokenizer is trained on `corpus`."""
    if kind not in BUILDERS:
        raise ValueError(f"no tiny VLM of kind {kind!r}; known: {sorted(BUILDERS)}")
    return BUILDERS[kind](out_dir, corpus)
