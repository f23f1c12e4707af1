"""Any image-text-to-text VLM with PEFT LoRA as a meme classifier: culture heads or a verbalizer.

`head`: the last real token's final hidden state feeds the shared heads (one output per culture).
`verbalizer`: the language-model logits of the two answer options at that position give
log P(hate option) − log P(other option) for every head, so AUROC is defined and a base model scores
memes zero-shot. `generate`: a text writer (the ToxicTags tag generator, src/crossmod/models/vlm/tag_generator.py):
forward is the language-model loss of the batch's answer tokens, `generate` writes answers greedily.
`quantization=4bit` loads the frozen base in 4 bits (bitsandbytes, CUDA only) under the LoRA weights.
Only LoRA weights (and heads) train; the base stays frozen and loadable from its own folder, so
adapters and heads are saved and shipped on their own (`full_finetune` trains the base itself instead: a
checkpoint, no adapter). What differs between families (module names
behind the LoRA presets, the answer token) comes from `crossmod.models.vlm.families`.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForImageTextToText

from crossmod.data.heads import HeadSpecs, parse_heads
from crossmod.models.activation_checkpointing import enable_activation_checkpointing
from crossmod.models.backbone import Adapters, Backbone, Generative
from crossmod.models.model_folders import refuse_shipped_code
from crossmod.models.vlm.cached_vision import CachedVision, cache_refusal
from crossmod.models.vlm.families import family_for
from crossmod.models.vlm.vision_cache import VisionFeatureStore

log = logging.getLogger(__name__)

# Batch entries that are not model inputs; every other tensor the family's processor returned is passed on.
NOT_MODEL_INPUTS = frozenset({"ids", "labels", "option_ids", "image_keys"})


def resolve_attn_implementation(requested: str) -> str:
    """`auto`: flash_attention_2 when flash-attn imports and a GPU is there, else sdpa (one log line)."""
    has_flash = importlib.util.find_spec("flash_attn") is not None
    if requested == "auto":
        chosen = "flash_attention_2" if has_flash and torch.cuda.is_available() else "sdpa"
        log.info(
            "attention implementation: %s (flash-attn %s, CUDA %s)",
            chosen,
            "importable" if has_flash else "not installed",
            "available" if torch.cuda.is_available() else "not available",
        )
        return chosen
    if requested == "flash_attention_2" and not has_flash:
        raise ValueError(
            "attn_implementation=flash_attention_2 was requested but the flash-attn package does not import; "
            "install flash-attn or use attn_implementation=auto|sdpa|eager"
        )
    return requested


def quantization_config(quantization: str | None) -> Any:
    """`4bit`: the base's linear layers in NF4 (double quantization, bf16 compute), as QLoRA recipes load it; null: none."""
    if quantization in (None, "none"):
        return None
    if quantization != "4bit":
        raise ValueError(f"model.fusion.quantization must be null or '4bit', got {quantization!r}")
    if not torch.cuda.is_available():
        raise ValueError(
            "model.fusion.quantization=4bit needs a CUDA GPU (bitsandbytes 4-bit layers run on CUDA); none is visible: leave it null on CPU"
        )
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ValueError("model.fusion.quantization=4bit needs the bitsandbytes package: pip install bitsandbytes (or leave it null)")
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(
        load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16
    )


def resolve_dtype(dtype: str) -> torch.dtype:
    """`auto`: bf16 on GPU, fp32 on CPU."""
    if dtype == "auto":
        return torch.bfloat16 if torch.cuda.is_available() else torch.float32
    return getattr(torch, dtype)


def adapter_autocast() -> bool:
    """Whether PEFT may keep the adapter's weights in fp32 beside a bf16 base: not under ZeRO-3.

    There the layers PEFT adds are partitioned as they are built, in the engine's dtype; PEFT's upcast then reaches
    only the empty placeholders, and DeepSpeed's optimizer refuses partitions of mixed dtypes (an AssertionError in
    `defragment`, seen on an H200 under bf16). DeepSpeed keeps an fp32 master copy of every trained weight itself, so
    the optimizer still steps in fp32.
    """
    from transformers.integrations import is_deepspeed_zero3_enabled

    return not is_deepspeed_zero3_enabled()


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of each row's last real token, for left or right padding alike."""
    positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
    return (attention_mask.long() * positions).argmax(dim=1)


def model_inputs(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The processor's tensors. No position ids: rotary positions are relative, so left padding's shift of
    every real token leaves attention unchanged (tested against right padding and against each meme alone)."""
    return {k: v for k, v in batch.items() if k not in NOT_MODEL_INPUTS and isinstance(v, torch.Tensor)}


class VLMClassifier(nn.Module, Backbone, Adapters, Generative):
    def __init__(
        self,
        name_or_path: str,
        heads: HeadSpecs,
        mode: str = "head",
        lora: dict[str, Any] | None = None,
        target_modules: str = "qv",
        vision_lora: bool = False,
        freeze_vision: bool = True,
        gradient_checkpointing: bool = False,
        dtype: str = "auto",
        attn_implementation: str = "auto",
        family: str | dict[str, Any] | None = "auto",
        quantization: str | None = None,
        full_finetune: bool = False,
        vision_cache: bool | str = "auto",
        vision_cache_dir: str | None = None,
    ) -> None:
        """`family`: `auto` (by the checkpoint's model_type), a family name, or a family row's fields.
        `full_finetune`: every language-model weight trains (no LoRA; the tower too unless `freeze_vision`),
        for bases whose frozen weights hold nothing worth adapting, such as the tiny random ones.
        `vision_cache`: keep each image's projected features in `vision_cache_dir` and run the tower once per
        image (src/crossmod/models/vlm/cached_vision.py); `auto` uses it whenever the features are a fixed function of the
        image and says why not otherwise, `true` refuses to run without it, `false` never uses it."""
        super().__init__()
        if mode not in ("head", "verbalizer", "generate"):
            raise ValueError(f"vlm mode must be 'head', 'verbalizer' or 'generate', got {mode!r}")
        typed = parse_heads(heads)
        if mode == "verbalizer" and not all(head.is_binary for head in typed.values()):
            raise ValueError("the verbalizer scores a hate/non-hate choice: every head must be binary")
        if full_finetune and (lora or quantization not in (None, "none")):
            raise ValueError(
                "model.fusion.full_finetune=true trains the base's own weights: set model.fusion.lora=null and leave quantization null"
            )
        self.mode, self.head_names = mode, list(typed)
        self.family = family_for(name_or_path, family)
        refuse_shipped_code(name_or_path)
        model = AutoModelForImageTextToText.from_pretrained(
            name_or_path,
            dtype=resolve_dtype(dtype),
            attn_implementation=resolve_attn_implementation(attn_implementation),
            quantization_config=quantization_config(quantization),
            trust_remote_code=False,
        )
        # from_pretrained returns eval mode and Lightning keeps whatever mode it finds: left so, Transformers'
        # activation checkpointing (active only while `training`) silently never ran during fit.
        model.train()
        model.requires_grad_(False)
        for name, parameter in model.named_parameters():
            vision = self.family.is_vision(name)
            parameter.requires_grad_((vision and not freeze_vision) or (full_finetune and not vision))
        if gradient_checkpointing:
            enable_activation_checkpointing(model, {"use_reentrant": False})
            model.disable_input_require_grads()  # see below, after PEFT
        if lora:
            from peft import LoraConfig, get_peft_model

            if vision_lora and not freeze_vision:
                raise ValueError(
                    "model.fusion.vision_lora=true adapts a frozen vision tower; freeze_vision=false trains the whole tower: choose one"
                )
            # PEFT freezes every weight that is not LoRA's: a tower that trains is one of its `modules_to_save`, so it
            # trains and its weights travel inside the adapter (a culture adapter without them would score another model)
            to_save = None if freeze_vision else self.family.vision_modules()
            config = LoraConfig(
                target_modules=self.family.targets(target_modules, vision_lora), modules_to_save=to_save, bias="none", **lora
            )
            model = get_peft_model(model, config, autocast_adapter_dtype=adapter_autocast())
            if gradient_checkpointing:
                # Transformers' checkpointing and PEFT both make the input embeddings' outputs require grad; in
                # Transformers 5 that hooks the vision tower's patch embedding too, so a frozen tower would keep
                # its activations and run backward on every step. Non-reentrant checkpoints reach the LoRA
                # weights inside them without inputs that require grad: the hooks go.
                model.get_base_model().disable_input_require_grads()
            _initialise_partitioned_lora(model, config.init_lora_weights)
        self.model = model
        self.vision_cache = self._vision_cache(vision_cache, vision_cache_dir, name_or_path, dtype, vision_lora)
        self.output_dim = model.config.get_text_config().hidden_size if mode == "head" else None

    def _vision_cache(
        self, requested: bool | str, directory: str | None, name_or_path: str, dtype: str, vision_lora: bool
    ) -> CachedVision | None:
        """The cached-features path, or None (with the reason logged for `auto`, raised for `true`)."""
        if requested not in (True, False, "auto"):
            raise ValueError(f"model.fusion.vision_cache must be true, false or auto, got {requested!r}")
        if requested is False:
            return None
        reason = cache_refusal(self.base_model(), self.family, vision_lora)
        if reason is None and not directory:
            reason = "model.fusion.vision_cache_dir is not set"
        if reason is not None:
            if requested is True:
                raise ValueError(f"model.fusion.vision_cache=true, but the image features cannot be cached: {reason}")
            log.info("vision cache off: %s", reason)
            return None
        store = VisionFeatureStore.open(directory, name_or_path, self.family.name, resolve_dtype(dtype))
        log.info("vision cache: %s", store.folder)
        return CachedVision(store)

    def inputs_for(self, batch: dict[str, Any]) -> dict[str, Any]:
        """The batch's model inputs, image features from the cache in place of pixels when it is on."""
        inputs = model_inputs(batch)
        if self.vision_cache is None:
            return inputs
        return self.vision_cache.inputs(self.base_model().model, inputs, batch.get("image_keys"))

    def base_model(self) -> nn.Module:
        """The ForConditionalGeneration model (inside the PEFT wrapper when there is one)."""
        return self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model

    def last_hidden(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.base_model().model(**self.inputs_for(batch)).last_hidden_state  # no LM head over every position
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return hidden[rows, last_token_index(batch["attention_mask"])]

    def answer_loss(self, batch: dict[str, Any]) -> torch.Tensor:
        """Mean cross-entropy over the answer tokens (`batch["answer"]["labels"]`: -100 on prompt, image and padding)."""
        return self.base_model()(**self.inputs_for(batch), labels=batch["answer"]["labels"]).loss

    def generate(self, batch: dict[str, Any], max_new_tokens: int, pad_token_id: int | None, synced_gpus: bool = False) -> torch.Tensor:
        """Greedy continuations of left-padded prompts: the new tokens only (rows end in padding after their end of turn)."""
        inputs = self.inputs_for(batch)
        sequences = self.base_model().generate(
            **inputs, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad_token_id, synced_gpus=synced_gpus
        )
        return sequences[:, inputs["input_ids"].shape[1] :]

    def forward(self, batch: dict[str, Any]) -> torch.Tensor | dict[str, torch.Tensor]:
        if self.mode == "generate":
            return self.answer_loss(batch)
        asked = batch.get("asked_heads")
        if asked and self.mode != "verbalizer":
            raise ValueError(
                "model.prompt.country=head asks each meme once per head, in that head's country: only the verbalizer "
                "reads one answer per head (model.fusion.mode=verbalizer)"
            )
        hidden = self.last_hidden(batch)
        if self.mode == "head":
            return hidden.float()
        logits = self.base_model().lm_head(hidden).float()
        options = logits.gather(1, batch["option_ids"])  # (rows, [hate, other])
        log_odds = options[:, 0] - options[:, 1]
        if asked:  # rows are meme-major: meme i's answer for head j is row i·len(asked) + j
            per_head = log_odds.view(-1, len(asked))
            return {head: per_head[:, asked.index(head)] for head in self.head_names}
        return {head: log_odds for head in self.head_names}

    def save_adapter(self, directory: str | Path) -> Path:
        """PEFT adapter files; refuses to leave an adapter without weights behind."""
        if not hasattr(self.model, "save_pretrained") or not hasattr(self.model, "peft_config"):
            raise ValueError("this VLM has no LoRA adapter to save (model.lora is null)")
        directory = Path(directory)
        self.model.save_pretrained(directory)
        check_adapter_file(directory / "adapter_model.safetensors")
        return directory

    def load_adapter(self, directory: str | Path) -> None:
        """Put a saved adapter onto this (adapter-free) base model."""
        from peft import PeftModel

        if hasattr(self.model, "peft_config"):
            raise ValueError("this VLM already has an adapter; build it with model.fusion.lora=null to load one")
        self.model = PeftModel.from_pretrained(self.model, str(directory))


def check_adapter_file(weights: Path) -> None:
    """Refuse an adapter file without tensors, or with empty ones (ZeRO-3 partitions saved ungathered)."""
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as handle:
        names = list(handle.keys())
        if not names:
            raise RuntimeError(f"{weights} holds no tensors: the adapter has no trainable LoRA weights")
        empty = [name for name in names if 0 in handle.get_slice(name).get_shape()]
    if empty:
        raise RuntimeError(
            f"{weights}: {len(empty)} of {len(names)} tensors are empty (e.g. {empty[0]}): "
            "ZeRO-3 partitions were saved without gathering them first"
        )


def _initialise_partitioned_lora(model: nn.Module, init_lora_weights: Any) -> None:
    """Redo PEFT's LoRA initialisation on gathered weights when ZeRO-3 partitioned them at creation.

    PEFT zeroes LoRA B in place right after building each layer; on a partitioned parameter that
    writes into an empty tensor, leaving B random and the adapted model different from its base.
    """
    from peft.tuners.lora import LoraLayer

    from crossmod.models.sharding import gathered, is_partitioned

    layers = [module for module in model.modules() if isinstance(module, LoraLayer)]
    params = [p for layer in layers for p in (*layer.lora_A.parameters(), *layer.lora_B.parameters())]
    if not any(is_partitioned(p) for p in params) or init_lora_weights is False:
        return
    with gathered(params, modifier_rank=0):
        for layer in layers:
            for adapter in layer.lora_A:
                layer.reset_lora_parameters(adapter, init_lora_weights)
