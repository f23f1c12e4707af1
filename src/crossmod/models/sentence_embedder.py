"""Sentence embeddings of short texts (tags) with any sentence-transformers model, loaded on first use.

A plain object, not a torch module: it never enters a Lightning module's parameters, optimizer or
checkpoint. The model is a local folder or a hub id; its files are read as weights only (no remote code).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class SentenceEmbedder:
    def __init__(self, name_or_path: str, batch_size: int = 64, device: str | None = None) -> None:
        """`device`: None is the current CUDA device when there is one, else the CPU."""
        self.name_or_path, self.batch_size, self.device = str(name_or_path), int(batch_size), device
        self._model: Any = None

    def _loaded(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
            self._model = SentenceTransformer(self.name_or_path, device=device, trust_remote_code=False)
        return self._model

    def encode(self, texts: list[str]) -> np.ndarray:
        """One float32 row per text (as the model returns it, not normalised); shape (0, dim) for no texts."""
        model = self._loaded()
        if not texts:
            return np.zeros((0, model.get_embedding_dimension()), dtype=np.float32)
        return np.asarray(model.encode(texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the loaded model (data-loader workers, checkpoints of hyperparameters)."""
        return {**self.__dict__, "_model": None}
