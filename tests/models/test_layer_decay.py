"""Layer-wise learning-rate decay (the LP-FT recipe's): each text-encoder layer's rate, checked on a real optimizer."""

from __future__ import annotations

import pytest

from crossmod.models.module import layer_scales


def test_scales_follow_the_layer_index() -> None:
    names = [
        "backbone.text.model.embeddings.word_embeddings.weight",
        "backbone.text.model.encoder.layer.0.attention.self.query.weight",
        "backbone.text.model.encoder.layer.1.output.dense.weight",
        "backbone.text.model.encoder.layer.2.output.dense.bias",
        "head_layers.linear.weight",
    ]
    scales = layer_scales(names, 0.5)
    assert scales[names[3]] == 0.5  # the top layer (2 of 3): 0.5^1
    assert scales[names[2]] == 0.25
    assert scales[names[1]] == 0.125
    assert scales[names[0]] == 0.0625  # embeddings: below the lowest layer
    assert names[4] not in scales  # the head trains at the base rate
    assert layer_scales(names, None) == {}
    with pytest.raises(ValueError, match="layer_decay"):
        layer_scales(names, 1.5)


def test_the_optimizer_gets_the_decayed_rates(tmp_path) -> None:
    from omegaconf import OmegaConf

    from crossmod.models.module import MemeClassifier
    from crossmod.models.tiny.bert import build_tiny_bert

    folder = build_tiny_bert(tmp_path / "tiny-bert", ["a meme caption", "another caption here"] * 20, num_layers=3)
    model = MemeClassifier(
        fusion={"_target_": "crossmod.models.fusion.TextOnly"},
        text={"_target_": "crossmod.models.backbones.text.HFTextEncoder", "name_or_path": str(folder), "pooling": "mean"},
        preprocessor={"_target_": "crossmod.models.preprocess.MemePreprocessor", "tokenizer": str(folder), "max_length": 16},
        heads={"US": {"kind": "binary"}},
        optimizer=OmegaConf.create({"_target_": "torch.optim.AdamW", "lr": 1e-3, "weight_decay": 0.01}),
        layer_decay=0.5,
    )
    model.configure_model()
    rates = {}
    for group in model.parameter_groups():
        for param in group["params"]:
            rates[id(param)] = group.get("lr", 1e-3)
    by_name = {name: rates[id(p)] for name, p in model.named_parameters()}
    depth = 1 + max(int(n.split(".layer.")[1].split(".")[0]) for n in by_name if ".layer." in n)
    top = next(n for n in by_name if f".layer.{depth - 1}." in n)
    assert by_name["head_layers.linear.weight"] == 1e-3
    assert by_name[top] == pytest.approx(1e-3 * 0.5)
    assert by_name[next(n for n in by_name if "embeddings" in n)] == pytest.approx(1e-3 * 0.5 ** (depth + 1))
