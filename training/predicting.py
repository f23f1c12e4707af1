"""Batched scoring of new memes with a loaded classifier, from images, JSONL or shards."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import torch

from datamodules.sample import IMAGE_EXTENSIONS
from datamodules.shards import read_samples
from models.heads import probabilities

IMAGE_SUFFIXES = {f".{ext}" for ext in IMAGE_EXTENSIONS} | {".jpeg"}


def read_inputs(path: Path, splits: list[str] | None = None) -> list[dict[str, Any]]:
    """Memes as sample dicts (id, text, image bytes, lang, labels={}); errors name the file and line."""
    if path.is_dir() and (path / "manifest.json").is_file():
        return read_samples(path, splits)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"{path}: no images ({sorted(IMAGE_SUFFIXES)}) and no manifest.json")
        return [{"id": p.stem, "text": "", "image": p.read_bytes(), "lang": "en", "labels": {}} for p in files]
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                image = item.get("image")
                records.append(
                    {
                        "id": str(item["id"]),
                        "text": item.get("text") or "",
                        "lang": item.get("lang") or "en",
                        "labels": {},
                        "image": (path.parent / image).read_bytes() if image else None,
                    }
                )
            except (json.JSONDecodeError, KeyError, OSError) as error:
                raise ValueError(f"{path}:{number}: cannot read this meme ({error})") from error
    return records


@torch.no_grad()
def predict(model: Any, records: list[dict[str, Any]], batch_size: int, threshold: float) -> list[dict[str, Any]]:
    """Probabilities per head; binary heads also get `decision` (probability ≥ threshold)."""
    model.eval()
    device = next(model.parameters()).device
    rows = []
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        batch = model.preprocessor.collate([model.preprocessor(r) for r in chunk])
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        logits = model(batch)
        for i, record in enumerate(chunk):
            row: dict[str, Any] = {"id": record["id"]}
            for head, spec in model.heads_spec.items():
                prob = probabilities(logits[head][i : i + 1].float(), spec["kind"])[0]
                if spec["kind"] == "binary":
                    row[f"{head}_probability"] = float(prob)
                    row[f"{head}_decision"] = int(float(prob) >= threshold)
                else:
                    row[f"{head}_probabilities"] = [round(float(p), 6) for p in prob]
            rows.append(row)
    return rows


def write_predictions(rows: list[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        with open(path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else ["id"])
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    return path
