"""Score new memes with an exported culture folder:
`python predict.py adapters=<folder> inputs=<images dir | memes.jsonl | shard dir> [threshold=0.5] [out=preds.csv]`.

Inputs: a folder of images (text empty), a JSONL file (`{"id", "text", "image": <path relative to the
file>, "lang"}` per line), or a shard directory written by crossmod. Output: one row per meme with each
head's probability and the decision at the threshold (JSONL or CSV by the file extension).
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

import training.resolvers  # noqa: F401


@hydra.main(version_base="1.3", config_path="configs", config_name="predict")
def main(cfg: DictConfig) -> None:
    from training.artifacts import load_culture
    from training.predicting import predict, read_inputs, write_predictions

    model, card = load_culture(cfg.adapters)
    if cfg.culture and cfg.culture != card["culture"]:
        raise ValueError(f"{cfg.adapters} is the {card['culture']} export, not {cfg.culture}")
    records = read_inputs(Path(cfg.inputs), cfg.splits)
    rows = predict(model, records, cfg.batch_size, cfg.threshold)
    path = write_predictions(rows, Path(cfg.out))
    print(f"[predict] {len(rows)} memes scored for {card['culture']} → {path}")


if __name__ == "__main__":
    main()
