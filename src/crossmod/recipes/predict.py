"""Score new memes with an exported culture folder, or several:
`crossmod predict adapters=<folder> inputs=<images dir | memes.jsonl | shard dir> [threshold=0.5] [out=preds.csv]`;
`adapters=[<US folder>,<DE folder>,…]` scores every culture's export in turn (one model in memory at a time) and writes,
beside each culture's columns, the memes' `disagreement` across the cultures (`disagreement=spread`, the standard
deviation of their probabilities, or `entropy`): what routes a meme to review when cultures judge it differently.

Inputs: a folder of images (text empty), a JSONL file (`{"id", "text", "image": <path relative to the
file>, "lang"}` per line), or a shard directory written by crossmod. Output: one row per meme with each
head's probability and the decision at the threshold (JSONL or CSV by the file extension).
Inputs get the conversion's checks (paths inside their folder, image size, signature and decoding):
a bad one stops the run naming file and line, or with `on_error=skip` is counted, listed and written
to `<out>.skipped.jsonl`. Memes without text get their caption read off the image with `ocr=rapidocr`
(or `tesseract`; written to the predictions as `ocr_text`, cached per image); a meme lacking an input the
model reads (text, image) stops the run naming it and how to provide it, unless `allow_missing` lists it.
A retrieval adapter (`export.py kind=retrieval`) scores each meme by its nearest labelled memes and writes
them as the explanation: `<culture>_neighbours` (ids, nearest first), their labels and similarities; `k=`
changes how many vote (default: the card's).
A base model the folder names but does not ship is given with `model.name_or_path=<local copy>` (VLM) or
`model.text.name_or_path=…` / `model.fusion.name_or_path=…` (configs/predict.yaml).
"""

import json
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

import crossmod.runtime.resolvers  # noqa: F401
from crossmod.launch import preflight
from crossmod.runtime.resolvers import package_configs
from crossmod.runtime.user_errors import UserError, entry_point


@hydra.main(version_base="1.3", config_path=str(package_configs()), config_name="predict")
@entry_point(preflight.predict)
def main(cfg: DictConfig) -> None:
    from crossmod.inference.new_memes import read_captions, read_inputs, write_predictions
    from crossmod.inference.scoring import scoring_trainer
    from crossmod.runtime.console import configure_console

    configure_console()  # before the first from_pretrained: no "Loading weights" bar over crossmod's own lines
    try:
        inputs = read_inputs(str(cfg.inputs), cfg.splits, on_error=cfg.on_error, max_image_bytes=cfg.max_image_bytes)
    except (ValueError, FileNotFoundError) as error:  # InputError, a manifest naming files outside its folder …
        raise UserError(str(error), key="inputs") from error
    if cfg.ocr:
        from crossmod.data.ocr import CaptionReader, ocr_engine

        reader = CaptionReader(ocr_engine(cfg.ocr, cfg.ocr_langs), Path(cfg.ocr_cache).expanduser() if cfg.ocr_cache else None)
        read = read_captions(inputs, reader)
        cached = f" ({reader.hits} from the cache {cfg.ocr_cache})" if cfg.ocr_cache else ""
        print(f"[predict] {read} captions read off their images with {cfg.ocr}{cached}")
    trainer = scoring_trainer(cfg.trainer)  # the trainer= group: device, precision, processes (data-parallel scoring)
    folders = preflight.adapter_folders(cfg)
    scored = [_culture_rows(cfg, folder, inputs, trainer) for folder in folders]  # one model in memory at a time
    cultures = [culture for culture, _ in scored]
    rows = [{k: v for row in by_meme for k, v in row.items()} for by_meme in zip(*(rows for _, rows in scored), strict=True)]
    if len(scored) > 1:  # several cultures' exports: how far they disagree on each meme, what routes it to review
        from crossmod.evaluation.abstention import disagreement

        spread = disagreement({culture: [row[f"{culture}_probability"] for row in rows] for culture in cultures}, cfg.disagreement)
        for row, value in zip(rows, spread.tolist(), strict=True):
            row["disagreement"] = value
    if not trainer.is_global_zero:
        return
    path = write_predictions(rows, Path(cfg.out))
    named = ", ".join(cultures) + (f"; disagreement: {cfg.disagreement} of the {len(cultures)} cultures' probabilities" if len(cultures) > 1 else "")
    print(f"[predict] {inputs.read} inputs read = {len(rows)} memes scored + {len(inputs.skipped)} skipped, for {named} → {path}")
    skipped = path.with_name(f"{path.name}.skipped.jsonl")
    skipped.unlink(missing_ok=True)  # never leave an earlier run's list beside these predictions
    if inputs.skipped:
        skipped.write_text("".join(json.dumps(vars(s), ensure_ascii=False) + "\n" for s in inputs.skipped), encoding="utf-8")
        for entry in inputs.skipped[:20]:
            print(f"  skipped {entry.input}: {entry.reason}")
        print(f"  all {len(inputs.skipped)} skipped inputs: {skipped}")


def _culture_rows(cfg: DictConfig, folder: str, inputs: Any, trainer: Any) -> tuple[str, list[dict[str, Any]]]:
    """One exported culture's rows for the inputs: its probability and decision, the calibrated probability its card's
    map gives, and its policy's action."""
    from crossmod.artifacts.bases import base_overrides
    from crossmod.artifacts.loading import load
    from crossmod.data.predict_inputs import check_inputs
    from crossmod.evaluation.calibration import calibrator_of
    from crossmod.inference.scoring import score

    model, info = load(folder, bases=base_overrides(cfg.model), expect="culture")  # a missing base: BaseModelError
    card = info["card"]
    if cfg.culture and cfg.culture != card["culture"]:
        raise UserError(f"{folder} is the {card['culture']} export, not {cfg.culture}", f"give culture={card['culture']} or the {cfg.culture} folder", "culture")
    if cfg.k is not None:
        if card.get("kind") != "retrieval":
            raise UserError(f"k={cfg.k} sets how many neighbours vote; {folder} scores with its head (not kind=retrieval)", "drop k=, or give a retrieval export (crossmod export kind=retrieval)", "k")
        from crossmod.models.retrieval.settings import RetrievalSettings

        model.score_by_retrieval(model.bank(), RetrievalSettings.of({"k": cfg.k, "weighting": model.retrieval_settings.weighting}))
    try:
        allowed = check_inputs(inputs, model.preprocessor.needs, frozenset(cfg.allow_missing))
    except ValueError as error:  # a meme lacking what the model reads, not allowed by allow_missing
        raise UserError(str(error), key="allow_missing") from error
    for name, ids in allowed.items():
        print(f"[predict] warning: {card['culture']}: {len(ids)} memes scored without {name} (allow_missing)")
    calibration = card.get("calibration") or {}  # fitted on the run's selection split, carried by the export
    calibrators = {card["culture"]: calibrator_of(calibration)} if calibration else None
    rows = score(trainer, model, inputs, cfg.batch_size, cfg.threshold, cfg.num_workers, calibrators)
    if card.get("policy"):  # act / review / allow by the thresholds the run's selection split chose for this culture
        from crossmod.inference.scoring import with_actions

        with_actions(rows, card["culture"], card["policy"])
    return card["culture"], rows


if __name__ == "__main__":
    main()
