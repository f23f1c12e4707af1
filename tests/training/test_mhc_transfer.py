"""MHC's transfer protocol: train on one dataset, select on its validation split, run MHC's functional report
on the selected weights (`train.py eval_data=mhc`, src/crossmod/results/eval_data.py)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score

from crossmod.data.heads import Head
from crossmod.data.shards import read_samples
from crossmod.data.sources.mhc import MHCSource
from crossmod.results.eval_data import EvalDataError, trained_head
from tests.conftest import SMALL_DATA

# MHC's real columns: Dutch and Mandarin files have no gender columns; Spanish and Italian leave case_templ
# empty and give gendered templates instead.
COLUMNS = [
    "mhc_case_id",
    "functionality",
    "test_case",
    "label_gold",
    "target_ident",
    "ref_case_id",
    "ref_templ_id",
    "templ_id",
    "case_templ",
    "gender_male",
    "gender_female",
    "label_annotated",
    "label_annotated_maj",
    "disagreement_in_case",
    "disagreement_in_template",
]
# functionality, label, target, template id, template, {target: case text}
CASES = {
    "german": [
        ("derog_neg_emote_h", "hateful", 1, "Ich hasse [IDENT_P].", {"women": "Ich hasse Frauen.", "gay people": "Ich hasse Schwule."}),
        ("threat_dir_h", "hateful", 2, "Ich werde alle [IDENT_P] töten.", {"women": "Ich werde alle Frauen töten."}),
        (
            "negate_neg_nh",
            "non-hateful",
            3,
            "Ich hasse [IDENT_P] nicht.",
            {"women": "Ich hasse Frauen nicht.", "gay people": "Ich hasse Schwule nicht."},
        ),
        (
            "counter_quote_nh",
            "non-hateful",
            4,
            'Wer sagt "Ich hasse [IDENT_P]", ist ein Idiot.',
            {"women": 'Wer sagt "Ich hasse Frauen", ist ein Idiot.'},
        ),
        ("slur_h", "hateful", 5, "Du bist nur eine [SLR_S].", {"gay people": "Du bist nur eine Schwuchtel."}),
        ("target_obj_nh", "non-hateful", 6, "Ich hasse Pizza.", {"": "Ich hasse Pizza."}),
        ("profanity_nh", "non-hateful", 7, "Was für ein Scheißtag.", {"": "Was für ein Scheißtag."}),
    ],
    "dutch": [
        ("derog_neg_emote_h", "hateful", 1, "Ik haat [IDENT_P].", {"women": "Ik haat vrouwen.", "gay people": "Ik haat homo's."}),
        ("threat_dir_h", "hateful", 2, "Ik ga alle [IDENT_P] vermoorden.", {"gay people": "Ik ga alle homo's vermoorden."}),
        (
            "negate_neg_nh",
            "non-hateful",
            3,
            "Ik haat [IDENT_P] niet.",
            {"women": "Ik haat vrouwen niet.", "gay people": "Ik haat homo's niet."},
        ),
        (
            "counter_quote_nh",
            "non-hateful",
            4,
            'Als je zegt "ik haat [IDENT_P]", discrimineer je!',
            {"women": 'Als je zegt "ik haat vrouwen", discrimineer je!'},
        ),
        ("target_obj_nh", "non-hateful", 6, "Ik haat bloemkool.", {"": "Ik haat bloemkool."}),
        ("profanity_nh", "non-hateful", 7, "Wat een kutdag.", {"": "Wat een kutdag."}),
    ],
    "spanish": [
        (
            "derog_neg_emote_h",
            "hateful",
            1,
            ("Odio a los [male_IDENT_P].", "Odio a las [female_IDENT_P]."),
            {"women": "Odio a las mujeres.", "gay people": "Odio a los gays."},
        ),
        (
            "threat_dir_h",
            "hateful",
            2,
            ("Voy a matar a todos los [male_IDENT_P].", "Voy a matar a todas las [female_IDENT_P]."),
            {"women": "Voy a matar a todas las mujeres."},
        ),
        (
            "negate_neg_nh",
            "non-hateful",
            3,
            ("No odio a los [male_IDENT_P].", "No odio a las [female_IDENT_P]."),
            {"women": "No odio a las mujeres.", "gay people": "No odio a los gays."},
        ),
        ("slur_h", "hateful", 5, ("Eres un [male_SLR_S].", "Eres una [female_SLR_S]."), {"gay people": "Eres un maricón."}),
        ("target_obj_nh", "non-hateful", 6, ("Odio la pizza.", "Odio la pizza."), {"": "Odio la pizza."}),
    ],
}


def write_mhc(root: Path) -> Path:
    """hatecheck_cases_final_<language>.csv files in MHC's real layout (a few dozen cases, three column sets)."""
    root.mkdir(parents=True, exist_ok=True)
    for language, cases in CASES.items():
        columns = [c for c in COLUMNS if language != "dutch" or not c.startswith("gender_")]
        number = 0
        with open(root / f"hatecheck_cases_final_{language}.csv", "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, columns)
            writer.writeheader()
            for functionality, label, templ_id, template, texts in cases:
                for target, text in texts.items():
                    number += 1
                    gendered = isinstance(template, tuple)
                    row = {
                        "mhc_case_id": f"{language}-{number}",
                        "functionality": functionality,
                        "test_case": text,
                        "label_gold": label,
                        "target_ident": target,
                        "templ_id": templ_id,
                        "case_templ": "" if gendered else template,
                        "label_annotated": str([label] * 3),
                        "label_annotated_maj": label,
                        "disagreement_in_case": "False",
                        "disagreement_in_template": "False",
                    }
                    if language != "dutch":
                        row["gender_male"], row["gender_female"] = template if gendered else ("", "")
                    writer.writerow(row)
    return root


@pytest.fixture
def mhc_raw(tmp_path: Path) -> Path:
    return write_mhc(tmp_path / "mhc")


TINY = ("model=text", *SMALL_DATA, "debug=limit")


def test_transfer_run_scores_mhc_with_the_best_checkpoint_of_the_training_data(train_run, mhc_raw):
    monitor = "val/MX/auroc"  # on these tiny runs its best epoch is not the last one
    result = train_run(
        *TINY,
        "trainer.max_epochs=3",
        "eval_data=mhc",
        f"eval_data.raw_dir={mhc_raw}",
        "transfer.head=MX",
        f"callbacks.model_checkpoint.monitor={monitor}",
        "keep_resume_checkpoints=true",  # the final weights are compared below
        env={"CROSSMOD_RUN_ID": "xfer"},
    )
    run = train_run.log_dir / "synthetic_text" / "runs" / "xfer"
    metrics = train_run.metrics(run)
    transfer = metrics["transfer"]["mhc"]
    out = run / "transfer" / "mhc"

    # The weights scored: the checkpoint of the epoch with the best val/MX/auroc on the synthetic data (the rows
    # logged during fit; the last row is the validation of the selected weights after it).
    logged = [r for r in csv.DictReader(open(run / "csv" / "metrics.csv")) if r.get(monitor) and int(r["epoch"]) < 3]
    best_epoch = max(logged, key=lambda r: float(r[monitor]))["epoch"]
    assert transfer["weights"] == metrics["best_checkpoint"] == str(run / "checkpoints" / f"epoch{int(best_epoch):03d}.ckpt")
    assert transfer["selection"]["monitor"] == f"{monitor} (max)" and transfer["selection"]["chosen_on"] == "synthetic validation data"
    assert transfer["selection"]["value"] == pytest.approx(max(float(r[monitor]) for r in logged), abs=1e-6)
    assert transfer["head"] == {"trained": "MX", "scored_as": "hateful", "rule": "transfer.head=MX"}

    # Every MHC case scored, with the predictions stored; the report's numbers are sklearn's on them.
    cases = {s.id: s for s in MHCSource(mhc_raw)}
    with open(transfer["predictions"], newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert sorted(r["id"] for r in rows) == sorted(cases) and transfer["split"]["items"] == len(cases) == 24
    prob = {r["id"]: float(r["hateful_probability"]) for r in rows}
    decision = {r["id"]: int(r["hateful_decision"]) for r in rows}
    assert all(decision[i] == int(prob[i] >= 0.5) for i in cases)
    functional = transfer["functional"]
    assert functional["languages"] == ["de", "es", "nl"] and functional["cases"] == 24
    for lang in functional["languages"]:
        ids = [i for i, s in cases.items() if s.lang == lang]
        y, p = [cases[i].labels["hateful"] for i in ids], [decision[i] for i in ids]
        scores = functional["per_language"][lang]
        assert scores["f1_h"] == pytest.approx(f1_score(y, p, pos_label=1, zero_division=0))
        assert scores["f1_nh"] == pytest.approx(f1_score(y, p, pos_label=0, zero_division=0))
        assert scores["macro_f1"] == pytest.approx(f1_score(y, p, average="macro", labels=[0, 1], zero_division=0))
        for functionality, cells in functional["accuracy"].items():
            cell = [i for i in ids if cases[i].meta["functionality"] == functionality]
            if cell:
                assert cells[lang] == pytest.approx(accuracy_score([cases[i].labels["hateful"] for i in cell], [decision[i] for i in cell]))
            else:
                assert cells[lang] is None  # no cases of it in this language: not a zero
    # Per target group: cases generated from an [IDENT] template (slurs and objects are not).
    templates = ("case_templ", "gender_male", "gender_female")
    ident = {i for i, s in cases.items() if s.meta["target_ident"] and any("IDENT" in (s.meta.get(k) or "") for k in templates)}
    groups = {(cases[i].lang, cases[i].meta["target_ident"]) for i in ident}
    assert set(functional["per_target"]) == {f"{lang}/{target}" for lang, target in groups} and len(groups) == 6
    for lang, target in groups:
        ids = [i for i in ident if (cases[i].lang, cases[i].meta["target_ident"]) == (lang, target)]
        expected = f1_score(
            [cases[i].labels["hateful"] for i in ids], [decision[i] for i in ids], average="macro", labels=[0, 1], zero_division=0
        )
        assert functional["per_target"][f"{lang}/{target}"] == pytest.approx(expected)
    y_all, ids_all = [cases[i].labels["hateful"] for i in sorted(cases)], sorted(cases)
    assert transfer["metrics"]["auroc"] == pytest.approx(roc_auc_score(y_all, [prob[i] for i in ids_all]), abs=1e-6)
    assert transfer["metrics"]["acc"] == pytest.approx(accuracy_score(y_all, [decision[i] for i in ids_all]))
    assert transfer["scalars"]["transfer/mhc/macro_f1/de"] == functional["per_language"]["de"]["macro_f1"]

    # The stored probabilities are the best checkpoint's MX head on the MHC cases (not the final weights').
    from crossmod.inference.scoring import score, single_device_trainer
    from crossmod.models.module import MemeClassifier

    records = read_samples(transfer["eval_dataset_dir"])
    best = MemeClassifier.load_from_checkpoint(transfer["weights"], map_location="cpu")
    again = score(single_device_trainer(), best, records, 16, 0.5)
    assert [r["MX_probability"] for r in again] == pytest.approx([prob[r["id"]] for r in records], abs=1e-6)
    last = MemeClassifier.load_from_checkpoint(run / "checkpoints" / "last.ckpt", map_location="cpu")
    if not all(torch.equal(a, b) for a, b in zip(best.state_dict().values(), last.state_dict().values())):
        final = score(single_device_trainer(), last, records, 16, 0.5)
        assert [r["MX_probability"] for r in final] != pytest.approx([prob[r["id"]] for r in records], abs=1e-6)

    # The files MHC reports always write, the protocol stated, the per-language table on the console.
    report = json.loads((out / "report.json").read_text())
    assert (
        report["protocol"]["weights"] == transfer["weights"] and report["runs"]["xfer"]["mhc"]["per_language"] == functional["per_language"]
    )
    assert (out / "functionalities-xfer.png").stat().st_size > 0
    summary = (out / "summary.md").read_text()
    assert "trained on synthetic, evaluated on mhc" in summary and f"best {monitor} (max)" in summary
    assert "mhc was never trained, validated or selected on" in summary and "all of mhc, every split" in summary
    assert "| es |" in summary and "derog_neg_emote_h" in summary
    assert "mhc (trained on synthetic): per language" in result.stdout and "macro F1" in result.stdout


def _refused(train_run, mhc_raw, *overrides: str) -> str:
    result = train_run(*TINY, "eval_data=mhc", f"eval_data.raw_dir={mhc_raw}", *overrides, check=False, env={"CROSSMOD_RUN_ID": "no"})
    assert result.returncode != 0
    assert not list(train_run.log_dir.glob("*/runs/no/checkpoints"))  # stopped before training
    return result.stderr


def test_missing_head_mapping_and_an_image_model_are_refused_before_training(train_run, mhc_raw):
    stderr = _refused(train_run, mhc_raw)  # five binary culture heads, none named hateful
    assert "EvalDataError" in stderr and "binary heads ['US', 'DE', 'MX', 'IN', 'CN']" in stderr and "transfer.head=<head>" in stderr
    stderr = _refused(train_run, mhc_raw, "model=concat", "transfer.head=US")  # reads the image; MHC is text only
    assert "EvalDataError: eval_data mhc" in stderr and "24 of 24 memes have no image" in stderr and "transfer.allow_missing" in stderr


def test_the_trained_head_is_named_or_unambiguous():
    binary = {name: Head(name, "binary") for name in ("US", "DE")}
    hateful = Head("hateful", "binary")
    sentiment = Head("sentiment", "multiclass", ("neg", "neu", "pos"))
    assert trained_head({"US": binary["US"], "sentiment": sentiment}, hateful, None, "mhc") == ("US", "the model's only binary head")
    assert trained_head({"hateful": hateful, **binary}, hateful, None, "mhc") == ("hateful", "same name as mhc's head")
    assert trained_head(binary, hateful, "DE", "mhc") == ("DE", "transfer.head=DE")
    with pytest.raises(EvalDataError, match=r"binary heads \['US', 'DE'\]: name the one .* transfer\.head="):
        trained_head(binary, hateful, None, "mhc")
    with pytest.raises(EvalDataError, match=r"transfer\.head=MX is not a head of the model \(heads: \['US', 'DE'\]\)"):
        trained_head(binary, hateful, "MX", "mhc")
    with pytest.raises(EvalDataError, match=r"transfer\.head=sentiment is a multiclass head"):
        trained_head({**binary, "sentiment": sentiment}, hateful, "sentiment", "mhc")


def test_xtc_transfer_recipe_is_the_study_protocol_on_the_training_data():
    from hydra import compose, initialize_config_dir

    from tests.conftest import ROOT

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=xtc_transfer", "data=hateful_memes", "data.raw_dir=/hm", "eval_data.raw_dir=/mhc"])
    assert cfg.model.text.name_or_path == "cardiffnlp/twitter-xlm-roberta-base" and cfg.model.head_dropout == 0.1
    assert cfg.model.optimizer.lr == 5e-5 and cfg.model.optimizer.weight_decay == 0.01 and cfg.data.batch_size == 32
    assert cfg.trainer.max_epochs == 50 and cfg.callbacks.early_stopping.patience == 5 and cfg.fold is None
    assert cfg.callbacks.early_stopping.monitor == cfg.callbacks.model_checkpoint.monitor == "val/mean/f1"  # the training data's
    assert cfg.data.source._target_.endswith("HatefulMemesSource") and cfg.eval_data.source._target_.endswith("MHCSource")
    assert cfg.eval_data.source.raw_dir == "/mhc" and cfg.data.source.raw_dir == "/hm" and cfg.eval_data.fold is None
    assert dict(cfg.transfer.reference.macro_f1) == {
        "ar": 59.4,
        "nl": 66.7,
        "fr": 67.6,
        "de": 68.9,
        "hi": 58.1,
        "it": 69.6,
        "zh": 71.5,
        "pl": 66.2,
        "pt": 68.5,
        "es": 69.5,
    }
    first = (ROOT / "configs" / "experiment" / "xtc_transfer.yaml").read_text().splitlines()[1]
    assert first.startswith("#   python train.py experiment=xtc_transfer data=")
