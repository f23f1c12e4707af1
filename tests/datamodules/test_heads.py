"""The Head type: widths, label tensors with -1 for unannotated items, probabilities, and clear errors."""

from __future__ import annotations

import pytest
import torch

from datamodules.heads import Head, label_mask, parse_heads


def test_widths_labels_and_probabilities_per_kind():
    heads = parse_heads(
        {
            "US": {"kind": "binary"},
            "sentiment": {"kind": "multiclass", "classes": ["neg", "neu", "pos"]},
            "emotion": {"kind": "multilabel", "classes": ["a", "b"]},
        }
    )
    assert [h.width for h in heads.values()] == [1, 3, 2]
    assert heads["US"].labels([1, None, 0]).tolist() == [1.0, -1.0, 0.0]
    assert heads["sentiment"].labels([2, None]).dtype == torch.long
    emotion = heads["emotion"].labels([[1, 0], None])
    assert emotion.tolist() == [[1.0, 0.0], [-1.0, -1.0]] and label_mask(emotion).tolist() == [True, False]
    logits = torch.tensor([[0.0, 1.0, 2.0]])
    assert torch.allclose(heads["sentiment"].probabilities(logits), logits.softmax(-1))
    assert torch.allclose(heads["US"].probabilities(torch.tensor([0.0])), torch.tensor([0.5]))


def test_bad_declarations_are_clear_errors():
    with pytest.raises(ValueError, match="head 'x': unknown kind 'ordinal'"):
        Head("x", "ordinal")
    with pytest.raises(ValueError, match="head 'y': a multiclass head needs its classes"):
        Head.from_spec("y", {"kind": "multiclass"})
