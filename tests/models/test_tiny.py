"""The tiny model folders: built once under concurrency, never half-written, tokenizers deterministic."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from crossmod.models.tiny.folder import build_once
from crossmod.models.tiny.wordpiece import SPECIAL_TOKENS, train_wordpiece


def test_a_folder_is_built_once_however_many_ask_at_once(tmp_path: Path):
    writes = []

    def write(staging: Path) -> None:
        writes.append(staging)
        staging.mkdir()
        (staging / "config.json").write_text("{}")

    out = tmp_path / "assets" / "tiny"
    threads = [threading.Thread(target=build_once, args=(out, write)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert build_once(out, write) == out
    assert len(writes) == 1 and writes[0].name == "tiny.partial"
    assert (out / "config.json").is_file() and not writes[0].exists()


def test_a_failed_build_leaves_no_folder_that_counts_as_built(tmp_path: Path):
    def fail(staging: Path) -> None:
        staging.mkdir()
        (staging / "config.json").write_text("{}")
        raise RuntimeError("killed mid-write")

    out = tmp_path / "tiny"
    with pytest.raises(RuntimeError, match="killed mid-write"):
        build_once(out, fail)
    assert not out.exists()

    def write(staging: Path) -> None:
        staging.mkdir()  # a fresh staging folder each build: nothing of the failed one is reused
        (staging / "weights").write_text("complete")

    assert (build_once(out, write) / "weights").read_text() == "complete"
    assert sorted(p.name for p in out.parent.iterdir()) == ["tiny", "tiny.lock"]  # no staging folder left behind


def test_the_wordpiece_vocabulary_follows_its_documented_order():
    corpus = ["the cat and the dog", "The dog sat", "a cat", "zebra"]
    tokenizer = train_wordpiece(corpus, vocab_size=400)
    vocab = tokenizer.get_vocab()
    assert [vocab[t] for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    words = sorted((vocab[w], w) for w in ("the", "cat", "dog", "and", "sat", "zebra"))
    assert [w for _, w in words] == ["the", "cat", "dog", "and", "sat", "zebra"]  # by frequency, ties alphabetical
    assert "##q" in vocab  # every ASCII character is reachable, inside a word too
    assert train_wordpiece(corpus, vocab_size=400).get_vocab() == vocab
    assert tokenizer("The cat")["input_ids"] == [vocab["[CLS]"], vocab["the"], vocab["cat"], vocab["[SEP]"]]


def test_the_vocabulary_stops_at_its_size():
    corpus = ["alpha beta gamma delta"]
    full = train_wordpiece(corpus, vocab_size=10_000)
    capped = train_wordpiece(corpus, vocab_size=len(full) - 2)
    assert len(capped) == len(full) - 2 and "alpha" in capped.get_vocab() and "gamma" not in capped.get_vocab()
