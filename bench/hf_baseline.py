"""What a user would write instead of crossmod: a Transformers VLM with a PEFT LoRA on the language model's q and v
projections and a linear head on the last token, trained by transformers.Trainer. Shared by bench/vlm_training.py and
bench/cv_protocol.py, which differ only in their data and in what they record."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

LORA_TARGET = r"model\.language_model\..*\.(q_proj|v_proj)"


class LastTokenClassifier(torch.nn.Module):
    """`outputs` logits from the last token's hidden state (left padding: the last token is real), BCE loss."""

    def __init__(self, model: str | Path | torch.nn.Module, outputs: int, lora: dict[str, Any]) -> None:
        """`model`: a checkpoint folder (loaded in float32 with SDPA) or a model already built (bench/gpu_throughput.py)."""
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForImageTextToText

        super().__init__()
        base = model
        if not isinstance(model, torch.nn.Module):
            base = AutoModelForImageTextToText.from_pretrained(
                model, dtype=torch.float32, attn_implementation="sdpa", trust_remote_code=False
            )
        base.requires_grad_(False)
        self.model = get_peft_model(base, LoraConfig(target_modules=LORA_TARGET, bias="none", **lora))
        self.head = torch.nn.Linear(base.config.get_text_config().hidden_size, outputs)

    def logits(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.model.get_base_model().model(**inputs).last_hidden_state[:, -1]
        return self.head(hidden)

    def forward(self, labels: torch.Tensor, **inputs: Any) -> dict[str, torch.Tensor]:
        inputs.pop("num_items_in_batch", None)  # the Trainer's loss-scaling hint; this loss is a plain mean
        logits = self.logits(inputs).reshape(labels.shape)
        return {"loss": torch.nn.functional.binary_cross_entropy_with_logits(logits, labels), "logits": logits}


def training_arguments(out: str, lr: float, use_cpu: bool = True, **settings: Any):
    """TrainingArguments as the benchmarks use them: constant lr, AdamW, no weight decay, no logging, checkpoints or
    progress bar, CPU unless `use_cpu=False`, batches in the dataset's order (`settings` add the run's sizes, workers,
    clipping, precision)."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=out,
        learning_rate=lr,
        lr_scheduler_type="constant",
        weight_decay=0.0,
        optim="adamw_torch",
        logging_strategy="no",
        save_strategy="no",
        report_to=[],
        use_cpu=use_cpu,
        remove_unused_columns=False,
        train_sampling_strategy="sequential",
        disable_tqdm=True,
        seed=0,
        **settings,
    )
