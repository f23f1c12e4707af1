"""`crossmod fewshot experiment=toxictags_fewshot …` end to end on a ToxicTags fixture in the real layout
(toxictags.jsonl + images/ written here), with a tiny random Qwen2-VL and the tiny CLIP; then the α search
with a stand-in model, to see which memes it asks. Random models: the scores mean nothing, the protocol does."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from PIL import Image

from crossmod.evaluation.fewshot_scores import STAGE_CLASSES, parse_stage_answer, stage_scores
from tests.conftest import ROOT, scaled
from tests.zygote import run_python

LABELS = ["normal", "hateful", "dangerous", "offensive", "undecided"]
TAGS = ["cats", "dogs", "politics", "sports"]


def write_toxictags(root: Path, train: int = 15, test: int = 5) -> dict[str, dict]:
    """toxictags.jsonl + images/: memes whose colour and tags follow their label, so retrieval has something to find."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    items = {}
    for k in range(train + test):
        label = LABELS[k % len(LABELS)]
        shade = 40 * (k % len(LABELS))
        buffer = io.BytesIO()
        Image.new("RGB", (40, 32), (shade, 255 - shade, (k * 37) % 256)).save(buffer, format="JPEG")
        (root / "images" / f"m{k}.jpg").write_bytes(buffer.getvalue())
        items[f"m{k}"] = {
            "id": f"m{k}",
            "image": f"images/m{k}.jpg",
            "title": f"post {k}",
            "ocr_text": f"words on meme {k}",
            "tags": [TAGS[k % len(LABELS) % len(TAGS)], f"tag{k % 3}"],
            "label": label,
            "split": "test" if k >= train else "train",
        }
    (root / "toxictags.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items.values()))
    return items


@pytest.fixture(scope="module")
def tiny_models(data_dir: Path) -> tuple[str, str]:
    from crossmod.data.synthetic import caption_corpus
    from crossmod.models.tiny.clip import build_tiny_clip
    from crossmod.runtime.resolvers import tiny_vlm

    clip = build_tiny_clip(data_dir / "assets" / "tiny-clip-synthetic", caption_corpus())
    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic")), str(clip)


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> tuple[Path, dict[str, dict]]:
    root = tmp_path_factory.mktemp("toxictags_fewshot")
    return root, write_toxictags(root)


def overrides(raw_dir: Path, qwen: str, clip: str, data_dir: Path) -> list[str]:
    return [
        "experiment=toxictags_fewshot",
        f"data.raw_dir={raw_dir}",
        f"paths.data_dir={data_dir}",
        f"model.name_or_path={qwen}",
        f"fewshot.clip={clip}",
        "model.preprocessor.image_size=56",
        "fewshot.max_new_tokens=4",
        "fewshot.alpha.heldout_size=4",
        "fewshot.alpha.grid=[0.0,0.5,1.0]",
        "fewshot.batch_size=8",
    ]


def test_entry_point_writes_the_side_by_side_report_and_reuses_the_embedding_cache(raw, tiny_models, data_dir, tmp_path):
    raw_dir, items = raw
    qwen, clip = tiny_models
    logs = tmp_path / "logs"

    def fewshot(run_id: str, *extra: str) -> subprocess.CompletedProcess:
        command = [
            sys.executable,
            "-m",
            "crossmod",
            "fewshot",
            *overrides(raw_dir, qwen, clip, data_dir),
            f"paths.log_dir={logs}",
            *extra,
        ]
        env = {**os.environ, "HYDRA_FULL_ERROR": "1", "CROSSMOD_RUN_ID": run_id}
        result = run_python(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(600))
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
        return result

    first = fewshot("one", "selection=[random,image_tags]", "shots=2", "stage=[1,2]")
    assert "image embeddings of 20 memes: computed and cached in" in first.stdout
    out = logs / "toxictags_fewshot" / "runs" / "one" / "fewshot"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["strategies"] == ["random", "image_tags"] and summary["shots"] == [2] and summary["family"] == "qwen2_vl"
    rows = list(csv.DictReader(open(out / "answers.csv")))
    train_ids = {f"toxictags/{k}" for k, v in items.items() if v["split"] == "train"}
    test_ids = {f"toxictags/{k}" for k, v in items.items() if v["split"] == "test"}
    undecided = {f"toxictags/{k}" for k, v in items.items() if v["label"] == "undecided"}
    for row in rows:
        assert set(row["exemplars"].split()) <= train_ids and row["id"] not in row["exemplars"].split()
        assert len(row["exemplars"].split()) == 2
    # stage II is four-way: normal memes are asked (gold "normal"), undecided ones are not asked at all
    test_rows = [r for r in rows if r["phase"] == "test"]
    stage2 = {r["id"]: r["gold"] for r in test_rows if r["stage"] == "2"}
    assert set(stage2) == test_ids - undecided and "normal" in stage2.values()
    assert {r["id"] for r in test_rows if r["stage"] == "1"} == test_ids
    # each result is scikit-learn's macro F1 of its answers as read from answers.csv
    for result in summary["results"]:
        mine = [
            r
            for r in test_rows
            if (r["strategy"], int(r["stage"]), int(r["shots"])) == (result["strategy"], result["stage"], result["shots"])
        ]
        classes = STAGE_CLASSES[result["stage"]]
        expected = stage_scores(
            [classes.index(r["gold"]) for r in mine], [parse_stage_answer(r["generation"], result["stage"]) for r in mine]
        )
        assert result["macro_f1"] == pytest.approx(expected["macro_f1"]) and result["invalid"] == expected["invalid"]
    (search,) = [s for s in summary["alpha_search"] if s["stage"] == 2]
    assert search["grid"] == [0.0, 0.5, 1.0] and search["heldout_size"] == 4 and search["chosen"] in search["grid"]
    assert {r["id"] for r in rows if r["phase"] == "alpha_search"} <= train_ids
    markdown = (out / "summary.md").read_text()
    assert "| exemplars | Stage I 2-shot | Stage II 2-shot |" in markdown and "| random |" in markdown and "| image_tags |" in markdown
    assert "chosen on 4 held-out training memes" in markdown

    cache = Path(summary["image_cache"]["file"])
    stamp = cache.stat().st_mtime_ns
    second = fewshot("two", "selection=image", "shots=2", "stage=1")
    assert f"image embeddings of 20 memes: read from {cache}" in second.stdout
    assert cache.stat().st_mtime_ns == stamp

    # two processes (gloo): every chat answered once by one rank, gathered in order: the same answers, printed once
    both = fewshot("two_processes", "selection=image", "shots=2", "stage=1", "trainer=ddp_cpu")
    assert "MEMBER: 2/2" in both.stdout + both.stderr and both.stdout.count("image embeddings of 20 memes") == 1
    answers = {
        run: list(csv.DictReader(open(logs / "toxictags_fewshot" / "runs" / run / "fewshot" / "answers.csv")))
        for run in ("two", "two_processes")
    }
    assert answers["two_processes"] == answers["two"] and answers["two"]


class CopyFirstExemplar:
    """Stands in for the VLM: answers with the first (most similar) exemplar's answer and records what it was asked."""

    asked: list[list[dict]] = []

    def __init__(self, *args, **kwargs) -> None:
        from crossmod.models.vlm.families import family_named

        self.family = family_named("qwen2_vl")

    def answer(self, chats):
        CopyFirstExemplar.asked += [memes for _, memes in chats]
        return [next(m for m in messages if m["role"] == "assistant")["content"][0]["text"] for messages, _ in chats]


def test_alpha_is_chosen_on_held_out_training_memes_only(raw, tiny_models, data_dir, tmp_path, monkeypatch):
    import crossmod.prompting.fewshot as fewshot

    raw_dir, items = raw
    qwen, clip = tiny_models
    cfg = compose_fewshot(raw_dir, qwen, clip, data_dir, tmp_path, "selection=image_tags", "shots=2", "stage=2")
    monkeypatch.setattr(fewshot, "FewShotGenerator", CopyFirstExemplar)
    monkeypatch.setattr(fewshot, "model_type", lambda name: "qwen2_vl")
    CopyFirstExemplar.asked = []
    summary = fewshot.run(cfg)

    train_ids = {f"toxictags/{k}" for k, v in items.items() if v["split"] == "train"}
    (search,) = summary["alpha_search"]
    search_rows = [r for r in csv.DictReader(open(tmp_path / "fewshot" / "answers.csv")) if r["phase"] == "alpha_search"]
    held = {r["id"] for r in search_rows}
    assert len(held) == 4 and held <= train_ids  # the queries of the search: training memes only
    for row in search_rows:  # their exemplars: the rest of train, never a held-out meme
        assert set(row["exemplars"].split()) <= train_ids - held
    # the search read no test meme at all: every meme shown while it ran is a training meme
    search_prompts = len({(r["id"], r["exemplars"]) for r in search_rows})  # asked once each (answers are memoised)
    shown_in_search = {m["id"] for memes in CopyFirstExemplar.asked[:search_prompts] for m in memes}
    assert shown_in_search <= train_ids
    # the chosen α is the best of the grid by macro F1 of the held-out answers (recomputed from answers.csv)
    by_alpha = {}
    for alpha in search["grid"]:
        mine = [r for r in search_rows if float(r["alpha"]) == alpha]
        classes = STAGE_CLASSES[2]
        by_alpha[alpha] = stage_scores([classes.index(r["gold"]) for r in mine], [classes.index(r["prediction"]) for r in mine])["macro_f1"]
    assert search["macro_f1"] == pytest.approx(list(by_alpha.values()))
    assert search["chosen"] == max(by_alpha, key=lambda a: (by_alpha[a], -search["grid"].index(a)))
    (result,) = summary["results"]
    assert result["alpha"] == search["chosen"]


def compose_fewshot(raw_dir: Path, qwen: str, clip: str, data_dir: Path, out: Path, *extra: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            "train", overrides=[*overrides(raw_dir, qwen, clip, data_dir), f"paths.log_dir={out}", f"paths.output_dir={out}", *extra]
        )
    OmegaConf.resolve(cfg)
    return cfg


def test_generated_tags_come_from_the_tags_file(raw, tiny_models, data_dir, tmp_path, monkeypatch):
    import crossmod.prompting.fewshot as fewshot

    raw_dir, items = raw
    monkeypatch.setattr(fewshot, "FewShotGenerator", CopyFirstExemplar)
    monkeypatch.setattr(fewshot, "model_type", lambda name: "qwen2_vl")
    tags_file = tmp_path / "tags.jsonl"
    test_ids = [k for k, v in items.items() if v["split"] == "test"]
    tags_file.write_text("".join(json.dumps({"id": k, "tags": ["generated words"]}) + "\n" for k in test_ids))
    extra = ("selection=[generated_tags]", "shots=2", "stage=1", f"fewshot.tags_file={tags_file}")
    summary = fewshot.run(compose_fewshot(raw_dir, *tiny_models, data_dir, tmp_path, *extra))
    assert summary["strategies"] == ["generated_tags"] and summary["tag_cache"]["tags"] == 1 + len(
        {t for v in items.values() for t in v["tags"]}
    )  # the generated tag joins the vocabulary embedded
    tags_file.write_text("".join(json.dumps({"id": k, "tags": ["generated words"]}) + "\n" for k in test_ids[1:]))
    with pytest.raises(ValueError, match=f"no tags for 1 queried memes \\(first: toxictags/{test_ids[0]}\\)"):
        fewshot.run(compose_fewshot(raw_dir, *tiny_models, data_dir, tmp_path, *extra))
