"""Batched scoring of new memes with a loaded classifier, from images, JSONL or shards (read and
checked by `datamodules.predict_inputs`)."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path
from typing import Any

import torch

from datamodules.batches import SamplesToBatch
from datamodules.predict_inputs import InputError, Inputs, read_inputs

__all__ = ["InputError", "Inputs", "predict", "read_captions", "read_inputs", "write_predictions"]


@torch.no_grad()
def predict(model: Any, records: list[dict[str, Any]], batch_size: int, threshold: float) -> list[dict[str, Any]]:
    """Probabilities per head; binary heads also get `decision` (probability ≥ threshold)."""
    model.eval()
    device = next(model.parameters()).device
    rows = []
    to_batch = SamplesToBatch(model.preprocessor)
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        batch = to_batch(chunk)
        batch = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        logits = model(batch)
        for i, record in enumerate(chunk):
            row: dict[str, Any] = {"id": record["id"]}
            if "ocr_text" in record:
                row["ocr_text"] = record["ocr_text"]
            for head, spec in model.heads.items():
                prob = spec.probabilities(logits[head][i : i + 1].float())[0]
                if spec.is_binary:
                    row[f"{head}_probability"] = float(prob)
                    row[f"{head}_decision"] = int(float(prob) >= threshold)
                else:
                    row[f"{head}_probabilities"] = [round(float(p), 6) for p in prob]
            rows.append(row)
    return rows


def read_captions(records: list[dict[str, Any]], reader: Any) -> int:
    """Fill the text of every meme that has an image but no text with the caption OCR reads off it
    (`ocr_text` too, for the predictions file); returns how many were read."""
    count = 0
    for record in records:
        if not str(record.get("text") or "").strip() and record.get("image") is not None:
            record["text"] = record["ocr_text"] = reader.read(record["image"])
            count += 1
    return count


def write_predictions(rows: list[dict[str, Any]], path: Path) -> Path:
    """UTF-8 CSV or JSONL, encoded in full before the file is replaced: a failure leaves no half file."""
    if path.suffix == ".csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=list(rows[0]) if rows else ["id"])
        writer.writeheader()
        writer.writerows(rows)
        text = buffer.getvalue()
    else:
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    data = text.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path
