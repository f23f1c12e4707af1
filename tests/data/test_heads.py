"""The Head type: widths, label tensors with -1 for unannotated items, probabilities, and clear errors."""

from __future__ import annotations

import pytest
import torch

from crossmod.data.heads import Head, label_mask, parse_heads


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


def test_binary_heads_and_typed_heads_pass_through():
    heads = parse_heads({"US": {"kind": "binary"}, "topic": {"kind": "multiclass", "classes": ["a", "b"]}})
    assert [h.is_binary for h in heads.values()] == [True, False]
    assert heads["topic"].classes == ("a", "b") and heads["topic"].name == "topic"
    assert parse_heads(heads) == heads  # typed heads parse to themselves


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"kind": "ordinal"}, r"head 'y' has kind 'ordinal'; expected one of \('binary', 'multiclass', 'multilabel'\)"),
        ({"classes": ["a", "b"]}, "head 'y' has kind None"),
        ({"kind": "multiclass"}, "multiclass head 'y' needs a list of at least two 'classes'"),
        ({"kind": "multilabel", "classes": ["a"]}, "multilabel head 'y' needs a list of at least two 'classes'"),
        ({"kind": "multiclass", "classes": "ab"}, "head 'y': 'classes' must be a list of names, got 'ab'"),
        ({"kind": "multiclass", "classes": [1, 2]}, r"head 'y': 'classes' must be a list of names, got \[1, 2\]"),
        ("binary", "head 'y' must be declared as {kind, classes}, got 'binary'"),
    ],
)
def test_bad_declarations_are_clear_errors(spec, message):
    with pytest.raises(ValueError, match=message):
        Head.from_spec("y", spec)
