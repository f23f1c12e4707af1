"""What Qwen2-VL's M-RoPE permits for padding-free training, established on CPU with SDPA: memes packed into
one sequence without an attention mask give each meme the same last-token features as the padded batch,
when the model gets `position_ids` of shape (4, 1, total) — row 0 the text positions restarting at 0 for
each meme (from which Transformers builds the block-diagonal mask), rows 1–3 each meme's own
(temporal, height, width) rotary positions from `get_rope_index` — and no KV cache (`use_cache=False`, as
in training: with a cache Transformers does not look for packed sequences). Given only the three M-RoPE rows, the
memes attend to each other and the features change (the second test): packing needs the fourth row."""

from __future__ import annotations

import pytest
import torch

from crossmod.runtime.resolvers import tiny_vlm
from tests.models.test_vlm_families import batch_of, build, samples


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tiny_vlm(str(tmp_path_factory.mktemp("packing") / "qwen2_vl"), "qwen2_vl")
    classifier = build(tmp_path_factory.mktemp("run"), folder, "model.fusion.lora=null", "model.prompt.input=image_caption")
    classifier.eval()
    return classifier


def packed(model, memes: list[dict], text_row: bool) -> tuple[dict, list[int]]:
    """One sequence of all memes (no padding) and the index of each meme's last token."""
    base = model.backbone.base_model().model
    parts = [batch_of(model, [meme]) for meme in memes]
    rows = []
    for part in parts:
        rope, _ = base.get_rope_index(
            part["input_ids"], part["mm_token_type_ids"], image_grid_thw=part["image_grid_thw"], attention_mask=part["attention_mask"]
        )
        text = torch.arange(part["input_ids"].shape[1]).view(1, 1, -1)
        rows.append(torch.cat([text, rope]) if text_row else rope)
    lengths = [part["input_ids"].shape[1] for part in parts]
    inputs = {
        "input_ids": torch.cat([p["input_ids"] for p in parts], dim=1),
        "pixel_values": torch.cat([p["pixel_values"] for p in parts]),
        "image_grid_thw": torch.cat([p["image_grid_thw"] for p in parts]),
        "mm_token_type_ids": torch.cat([p["mm_token_type_ids"] for p in parts], dim=1),
        "position_ids": torch.cat(rows, dim=2),
    }
    return inputs, [sum(lengths[: i + 1]) - 1 for i in range(len(lengths))]


def features(model, inputs: dict, last: list[int]) -> torch.Tensor:
    with torch.no_grad():
        hidden = model.backbone.base_model().model(**inputs, use_cache=False).last_hidden_state  # a cache hides the packing
    return hidden[0, last]


def test_packed_memes_with_text_positions_equal_the_padded_batch(model):
    memes = samples(size=3)
    padded_batch = batch_of(model, memes)
    assert (padded_batch["attention_mask"] == 0).any(), "the batch must hold padding for the comparison to mean something"
    with torch.no_grad():
        padded = model.backbone.last_hidden(padded_batch)
    inputs, last = packed(model, memes, text_row=True)
    assert inputs["input_ids"].shape[1] == int(padded_batch["attention_mask"].sum())  # no padding computed
    torch.testing.assert_close(features(model, inputs, last), padded, rtol=1e-4, atol=1e-4)


def test_without_the_text_row_packed_memes_attend_to_each_other(model):
    memes = samples(size=3)
    with torch.no_grad():
        padded = model.backbone.last_hidden(batch_of(model, memes))
    inputs, last = packed(model, memes, text_row=False)
    later = features(model, inputs, last)[1:]  # the first meme sees only itself either way
    assert not torch.allclose(later, padded[1:], rtol=1e-3, atol=1e-3)
