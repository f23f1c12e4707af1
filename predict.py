"""Score new memes with an exported culture folder:
`python predict.py adapters=<folder> inputs=<images dir | memes.jsonl | shard dir> [threshold=0.5] [out=preds.csv]`.

Inputs: a folder of images (text empty), a JSONL file (`{"id", "text", "image": <path relative to the
file>, "lang"}` per line), or a shard directory written by crossmod. Output: one row per meme with each
head's probability and the decision at the threshold (JSONL or CSV by the file extension).
Inputs get the conversion's checks (paths inside their folder, image size, signature and decoding):
a bad one stops the run naming file and line, or with `on_error=skip` is counted, listed and written
to `<out>.skipped.jsonl`.
"""

import json
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import training.resolvers  # noqa: F401


@hydra.main(version_base="1.3", config_path="configs", config_name="predict")
def main(cfg: DictConfig) -> None:
    from training.artifacts import load_culture
    from training.predicting import predict, read_inputs, write_predictions

    try:
        inputs = read_inputs(str(cfg.inputs), cfg.splits, on_error=cfg.on_error, max_image_bytes=cfg.max_image_bytes)
    except (ValueError, FileNotFoundError) as error:  # InputError, a manifest naming files outside its folder …
        print(f"[predict] error: {error}", file=sys.stderr)
        sys.exit(1)
    model, card = load_culture(cfg.adapters)
    if cfg.culture and cfg.culture != card["culture"]:
        raise ValueError(f"{cfg.adapters} is the {card['culture']} export, not {cfg.culture}")
    rows = predict(model, inputs, cfg.batch_size, cfg.threshold)
    path = write_predictions(rows, Path(cfg.out))
    print(f"[predict] {inputs.read} inputs read = {len(rows)} memes scored + {len(inputs.skipped)} skipped, for {card['culture']} → {path}")
    skipped = path.with_name(f"{path.name}.skipped.jsonl")
    skipped.unlink(missing_ok=True)  # never leave an earlier run's list beside these predictions
    if inputs.skipped:
        skipped.write_text("".join(json.dumps(vars(s), ensure_ascii=False) + "\n" for s in inputs.skipped), encoding="utf-8")
        for entry in inputs.skipped[:20]:
            print(f"  skipped {entry.input}: {entry.reason}")
        print(f"  all {len(inputs.skipped)} skipped inputs: {skipped}")


if __name__ == "__main__":
    main()
