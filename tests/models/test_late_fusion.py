"""Late fusion as the Hateful Memes study runs it: the two classifiers' probabilities averaged (hand-computed
here for every head kind), returned as logits whose probabilities are that average; `combine=logits`
averages the logits instead (a named deviation)."""

from __future__ import annotations

import math

import pytest
import torch

from crossmod.data.heads import Head
from crossmod.data.synthetic import caption_corpus
from crossmod.models.fusion import mean_probability_logits
from crossmod.models.tiny.bert import build_tiny_bert
from tests.models.test_families import build_model, one_batch


def sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def test_binary_and_multilabel_heads_average_the_two_sigmoids():
    a, b = torch.tensor([2.0, -1.0, 30.0]), torch.tensor([-0.5, -3.0, -30.0])
    for head in (Head("US", "binary"), Head("tags", "multilabel", ("x", "y", "z"))):
        fused = mean_probability_logits(a, b, head)
        expected = [(sigmoid(x) + sigmoid(y)) / 2 for x, y in zip(a.tolist(), b.tolist())]
        assert fused.sigmoid().tolist() == pytest.approx(expected, abs=1e-6)
        assert torch.isfinite(fused).all()  # saturated sigmoids stay finite in log space
    assert mean_probability_logits(torch.tensor([1.0]), torch.tensor([3.0]), Head("US", "binary")).item() != pytest.approx(2.0)


def test_multiclass_heads_average_the_two_softmaxes():
    head = Head("stage2", "multiclass", ("hateful", "dangerous", "offensive", "normal"))
    a, b = torch.tensor([[1.0, 0.0, -1.0, 2.0]]), torch.tensor([[0.0, 3.0, 0.0, 0.0]])
    expected = (a.softmax(-1) + b.softmax(-1)) / 2
    torch.testing.assert_close(mean_probability_logits(a, b, head).softmax(-1), expected)
    torch.testing.assert_close(mean_probability_logits(a, b, head).exp(), expected)  # already log-probabilities


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert") / "bert", caption_corpus())


def test_late_fusion_averages_probabilities_by_default_and_logits_on_request(bert, tmp_path):
    def fused(combine: str):
        model = build_model(["model=late_fusion", f"model.text.name_or_path={bert}", f"model.fusion.combine={combine}"], tmp_path)
        model.eval()
        batch = one_batch(model)
        backbone = model.backbone
        with torch.no_grad():
            text = backbone.text_head_layers(backbone.text_mlp(backbone.text(batch["input_ids"], batch["attention_mask"])))
            image = backbone.image_head_layers(backbone.image_mlp(backbone.image(batch["pixel_values"])))
            return model(batch), text, image

    logits, text, image = fused("probabilities")
    for name in logits:
        torch.testing.assert_close(logits[name].sigmoid(), (text[name].sigmoid() + image[name].sigmoid()) / 2)
    logits, text, image = fused("logits")
    for name in logits:
        torch.testing.assert_close(logits[name], (text[name] + image[name]) / 2)
    with pytest.raises(Exception, match=r"late fusion combine must be one of \('probabilities', 'logits'\), got 'median'"):
        fused("median")  # Hydra wraps the ValueError, message kept
