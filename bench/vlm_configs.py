"""The published Qwen2-VL / Qwen2.5-VL architectures, as their `config.json` files state them.

Only what the files say is written here (the fields that shape the model); what a file leaves out
(Qwen2-VL-7B's whole vision tower, Qwen2.5-VL-7B's vision depth and MLP width) is Transformers' default
for that config class, which is what `from_pretrained` builds for the released checkpoints too.
No download: the values were read from copies of the files on the Hugging Face hub, named per entry.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig, Qwen2_5_VLConfig, Qwen2VLConfig

_QWEN_TOKENS = {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653}
_MROPE = {"rope_scaling": {"mrope_section": [16, 24, 24], "rope_type": "default", "type": "default"}, "rope_theta": 1000000.0}

PUBLISHED: dict[str, dict[str, Any]] = {
    # Qwen/Qwen2-VL-2B-Instruct config.json, read from copies that name it as their source
    # (huggingface.co/lightonai/MonoQwen2-VL-v0.1 and huggingface.co/onnx-community/Qwen2-VL-2B-Instruct @214aa9f,
    # both "_name_or_path": "Qwen/Qwen2-VL-2B-Instruct").
    "qwen2-vl-2b": {
        "model_type": "qwen2_vl",
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_attention_heads": 12,
        "num_hidden_layers": 28,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "vision_config": {"hidden_size": 1536, "in_chans": 3, "model_type": "qwen2_vl", "spatial_patch_size": 14},
    },
    # Qwen/Qwen2-VL-7B-Instruct config.json: the copy in huggingface.co/pbarker/Qwen2-VL-7B-sk-googleflights-full-750-47ep
    # ("_name_or_path": the hub snapshot a7a06a1c of Qwen/Qwen2-VL-7B-Instruct), identical in these fields to Qwen's own
    # huggingface.co/Qwen/Qwen2-VL-7B-Instruct-GPTQ-Int8 @34bb8e5.
    "qwen2-vl-7b": {
        "model_type": "qwen2_vl",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "vision_config": {"in_chans": 3, "model_type": "qwen2_vl", "spatial_patch_size": 14},
    },
    # Qwen/Qwen2-VL-72B-Instruct config.json: huggingface.co/OPEA/Qwen2-VL-72B-Instruct-int4-sym-inc @e67cae7 (quantised
    # from the bf16 release, dimensions unchanged); vision_config as in huggingface.co/lktinhtemp/Qwen2-VL-72B-Instruct-GPTQ-Int4_768x768.
    # Qwen's own GPTQ/AWQ copies list intermediate_size 29696: padded for the 4-bit kernels, not the bf16 model's 29568.
    "qwen2-vl-72b": {
        "model_type": "qwen2_vl",
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_attention_heads": 64,
        "num_hidden_layers": 80,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "vision_config": {"hidden_size": 8192, "in_chans": 3, "model_type": "qwen2_vl", "spatial_patch_size": 14},
    },
    # Qwen/Qwen2.5-VL-7B-Instruct config.json: huggingface.co/unsloth/Qwen2.5-VL-7B-Instruct and Qwen's own
    # huggingface.co/Qwen/Qwen2.5-VL-7B-Instruct-AWQ (both "_name_or_path": "Qwen/Qwen2.5-VL-7B-Instruct"; the AWQ copy
    # leaves the vision tower unquantised and the LLM dimensions as they are).
    "qwen2.5-vl-7b": {
        "model_type": "qwen2_5_vl",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "vision_config": {"hidden_size": 1280, "in_chans": 3, "model_type": "qwen2_5_vl", "spatial_patch_size": 14, "tokens_per_second": 2},
    },
    # Qwen/Qwen2.5-VL-72B-Instruct config.json: vision_config from Qwen's huggingface.co/Qwen/Qwen2.5-VL-72B-Instruct-AWQ @666b8f5
    # ("_name_or_path": "Qwen/Qwen2.5-VL-72B-Instruct"; vision tower not quantised). That copy's LLM intermediate_size is the
    # 4-bit padding 29696; the bf16 release has Qwen2.5-72B's 29568 (copies of Qwen/Qwen2.5-72B-Instruct's config.json,
    # e.g. huggingface.co/m8than/banana-2-b-72b), which the parameter count of 73.4 B on the model card confirms (test).
    "qwen2.5-vl-72b": {
        "model_type": "qwen2_5_vl",
        "hidden_size": 8192,
        "intermediate_size": 29568,
        "num_attention_heads": 64,
        "num_hidden_layers": 80,
        "num_key_value_heads": 8,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "vision_config": {
            "hidden_size": 1280,
            "in_chans": 3,
            "intermediate_size": 3456,
            "model_type": "qwen2_5_vl",
            "out_hidden_size": 8192,
            "spatial_patch_size": 14,
            "tokens_per_second": 2,
        },
    },
}

_CLASSES = {"qwen2_vl": Qwen2VLConfig, "qwen2_5_vl": Qwen2_5_VLConfig}


def named_config(name: str) -> PretrainedConfig:
    """The Transformers config a released checkpoint's `config.json` gives (same token ids and M-RoPE)."""
    if name not in PUBLISHED:
        raise ValueError(f"unknown Qwen VL config {name!r}; known: {sorted(PUBLISHED)}")
    fields = {**PUBLISHED[name], **_QWEN_TOKENS, **_MROPE}
    return _CLASSES[fields["model_type"]](**fields)


def parameter_count(config: PretrainedConfig) -> int:
    """Every parameter of the model a config builds (counted on the meta device: no memory, no weights)."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())
