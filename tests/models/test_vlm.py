"""The VLM family against tiny random Qwen2-VL and Qwen2.5-VL folders loaded with `from_pretrained`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate
from omegaconf import OmegaConf
from packaging.version import Version

from crossmod.artifacts import adapter_folder
from crossmod.data.synthetic import SyntheticMemeSource
from crossmod.models.module import MemeClassifier
from crossmod.models.vlm.classifier import last_token_index, resolve_attn_implementation
from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import ROOT

# Transformers 5.23 renamed `is_gradient_checkpointing` `is_activation_checkpointing` (the old name warns there); the
# floor stack (constraints-floor.txt) has only the old name.
CHECKPOINTING = "is_activation_checkpointing" if Version(transformers.__version__) >= Version("5.23") else "is_gradient_checkpointing"

VERSIONS = ("qwen2_vl", "qwen2_5_vl")


@pytest.fixture(scope="module")
def tiny_vlms(data_dir) -> dict[str, str]:
    return {version: tiny_vlm(str(data_dir / "assets" / f"tiny-{version}-synthetic"), version) for version in VERSIONS}


def build(tmp_path: Path, *overrides: str) -> MemeClassifier:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                f"paths.data_dir={tmp_path}",
                f"paths.output_dir={tmp_path}",
                "model=vlm",
                "model.preprocessor.image_size=56",
                *overrides,
            ],
        )
    model = instantiate(OmegaConf.to_container(cfg.model, resolve=True), _recursive_=False)
    model.configure_model()
    return model


def batch_of(model: MemeClassifier, size: int = 6) -> dict:
    samples = [
        {"id": s.id, "text": s.text, "image": s.image, "labels": s.labels, "lang": s.lang}
        for s, _ in zip(SyntheticMemeSource(num_groups=4, image_size=64, seed=5), range(size))
    ]
    return model.preprocessor.collate([model.preprocessor(s) for s in samples])


def loss_of(model: MemeClassifier, batch: dict) -> torch.Tensor:
    return model.heads_loss(model(batch), batch["labels"])


def saved_bytes(step) -> int:
    """Bytes autograd saves for backward while `step` runs (what activation checkpointing reduces)."""
    total = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        total[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        step()
    return total[0]


@pytest.mark.parametrize("version", VERSIONS)
def test_only_lora_and_heads_train_and_loss_falls(version, tiny_vlms, tmp_path):
    model = build(tmp_path, f"model.name_or_path={tiny_vlms[version]}")
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name or name.startswith("head_layers.") for name in trainable), sorted(trainable)[:5]
    lora = [n for n in trainable if "lora_" in n]
    layers = model.backbone.model.config.get_text_config().num_hidden_layers
    assert len(lora) == layers * 2 * 2  # q and v of every language-model layer, A and B each
    assert not any("visual" in n for n in lora)
    head_weights = sum(p.numel() for p in model.head_layers.parameters())
    counted = sum(p.numel() for n, p in model.named_parameters() if p.requires_grad)
    assert counted == head_weights + sum(p.numel() for n, p in model.named_parameters() if "lora_" in n)

    batch = batch_of(model)
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=5e-3)
    first = loss_of(model, batch).item()
    for _ in range(10):
        optimizer.zero_grad()
        loss_of(model, batch).backward()
        optimizer.step()
    assert loss_of(model, batch).item() < first


@pytest.mark.parametrize("version", VERSIONS)
def test_adapter_and_heads_reload_onto_a_fresh_base(version, tiny_vlms, tmp_path):
    model = build(tmp_path, f"model.name_or_path={tiny_vlms[version]}")
    batch = batch_of(model)
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=5e-3)
    for _ in range(3):  # move LoRA B away from zero, so the adapter changes the logits
        optimizer.zero_grad()
        loss_of(model, batch).backward()
        optimizer.step()
    exported = adapter_folder.save(model, tmp_path / "adapter")
    assert {p.name for p in exported.iterdir()} >= {"adapter_config.json", "adapter_model.safetensors", "head.safetensors", "heads.json"}

    fresh = build(tmp_path, f"model.name_or_path={tiny_vlms[version]}", "model.fusion.lora=null")
    model.eval(), fresh.eval()
    with torch.no_grad():
        assert not torch.equal(fresh(batch)["US"], model(batch)["US"])
        adapter_folder.load(fresh, exported, {"base_model": "the tiny VLM"})
        for head, logits in model(batch).items():
            torch.testing.assert_close(fresh(batch)[head], logits, rtol=0, atol=0)


def test_vision_lora_and_all_linear_presets(tiny_vlms, tmp_path):
    model = build(
        tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.fusion.target_modules=all_linear", "model.fusion.vision_lora=true"
    )
    lora = {n for n, p in model.named_parameters() if p.requires_grad and "lora_A" in n}
    assert any("visual" in n for n in lora)
    assert {n.split(".lora_A")[0].rsplit(".", 1)[1] for n in lora if "visual" not in n} == {
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    }


def test_full_finetuning_trains_the_base_and_refuses_lora(tiny_vlms, tmp_path):
    """`full_finetune` (the tiny random bases' recipe): every language-model weight trains, the tower only when
    `freeze_vision=false`; with LoRA still configured it is refused, naming both settings."""
    common = (f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.fusion.lora=null", "model.fusion.full_finetune=true")
    model = build(tmp_path, *common)
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    assert frozen and all(".visual." in n for n in frozen), sorted(frozen)[:5]
    assert any(".language_model." in n for n, p in model.named_parameters() if p.requires_grad)
    everything = build(tmp_path, *common, "model.fusion.freeze_vision=false")
    assert all(p.requires_grad for p in everything.parameters())
    with pytest.raises(Exception, match=r"(?s)full_finetune=true.*lora=null"):  # Hydra wraps the ValueError
        build(tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.fusion.full_finetune=true")


def test_verbalizer_scores_the_answer_options(tiny_vlms, tmp_path):
    model = build(tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.fusion.mode=verbalizer", "model.fusion.lora=null")
    assert model.head_layers is None and not any(p.requires_grad for p in model.parameters())
    tokenizer = model.preprocessor.processor.tokenizer
    a, b = (tokenizer.encode(x, add_special_tokens=False)[0] for x in "ab")
    batch = batch_of(model)
    assert batch["option_ids"].tolist() == [[a, b]] * 6  # prompt 0: a = Hate
    model.eval()
    with torch.no_grad():
        scores = model(batch)
        logits = model.backbone.base_model().lm_head(model.backbone.last_hidden(batch))
    torch.testing.assert_close(scores["US"], logits[:, a] - logits[:, b])
    assert all(torch.equal(scores["US"], scores[h]) for h in scores)

    odd = build(
        tmp_path,
        f"model.name_or_path={tiny_vlms['qwen2_vl']}",
        "model.fusion.mode=verbalizer",
        "model.fusion.lora=null",
        "model.prompt.index=1",
    )
    assert batch_of(odd)["option_ids"].tolist() == [[b, a]] * 6  # prompt 1: b = Hate


def test_country_per_head_verbalizer_answers_each_head_in_its_country(tiny_vlms, tmp_path):
    """`model.prompt.country=head`: each meme is asked once per head, naming that head's country, and head h scores
    exactly what the same model answers when every meme is asked in h's country alone (rows are not mixed up)."""
    common = (f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.fusion.mode=verbalizer", "model.fusion.lora=null")
    model = build(tmp_path, *common, "model.prompt.country=head", "model.prompt.index=2")
    countries = model.preprocessor.prompt.head_countries
    sample = {"id": "x", "text": "typical clowns", "image": None, "labels": {}, "lang": "de"}
    chats = model.preprocessor(sample)["chats"]
    assert [f"in {countries[h]}." in chat for h, chat in zip(model.heads, chats)] == [True] * len(model.heads)
    batch = batch_of(model, size=3)
    assert batch["input_ids"].shape[0] == 3 * len(model.heads) and batch["asked_heads"] == list(model.heads)
    model.eval()
    with torch.no_grad():
        scores = model(batch)
        for head in model.heads:
            alone = build(tmp_path, *common, f"model.prompt.country={countries[head]}", "model.prompt.index=2")
            alone.load_state_dict(model.state_dict())
            torch.testing.assert_close(scores[head], alone(batch_of(alone, size=3))["US"], rtol=1e-5, atol=1e-5)
    assert not torch.equal(scores["US"], scores["DE"])

    from crossmod.prompting.zeroshot import answer_all

    with pytest.raises(ValueError, match="zero-shot answers each meme once per prompt"):
        answer_all(None, model, [], prompt_index=0, batch_size=2, max_new_tokens=1)

    head_mode = build(tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.prompt.country=head")
    with pytest.raises(ValueError, match="only the verbalizer reads one answer per head"):
        head_mode(batch_of(head_mode, size=2))
    with pytest.raises(Exception, match=r"no country for head\(s\) \[.{0,4}DE"):  # Hydra wraps (and escapes) the ValueError
        build(tmp_path, *common, "model.prompt.country=head", "~model.prompt.head_countries.DE")


def test_prompt_variants_render_through_the_chat_template(tiny_vlms, tmp_path):
    model = build(
        tmp_path,
        f"model.name_or_path={tiny_vlms['qwen2_vl']}",
        "model.prompt.input=image_caption",
        "model.prompt.index=3",
        "model.prompt.country=language",
    )
    sample = {"id": "x", "text": "typical clowns", "image": None, "labels": {}, "lang": "de"}
    chat = model.preprocessor(sample)["chats"][0]
    assert "<|vision_start|><|image_pad|><|vision_end|>" in chat and chat.endswith("<|im_start|>assistant\n")
    assert "answer if it is 'Hate Speech' or 'Non-Hate Speech' in Germany." in chat  # the study's country insertion of question 2
    assert "\nCaption inside the meme: 'typical clowns'\nChoose:\na: Non-hate\nb: Hate\n" in chat

    caption_only = build(tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}", "model.prompt.input=caption")
    features = caption_only.preprocessor(sample)
    assert "<|image_pad|>" not in features["chats"][0] and features["image"] is None
    assert "pixel_values" not in caption_only.preprocessor.collate([features])


def test_last_real_token_for_left_and_right_padding():
    right = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    left = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert last_token_index(right).tolist() == [2, 4]
    assert last_token_index(left).tolist() == [4, 4]


def test_attention_implementation_choice():
    assert resolve_attn_implementation("auto") in ("sdpa", "flash_attention_2")
    if not torch.cuda.is_available():
        assert resolve_attn_implementation("auto") == "sdpa"
    assert resolve_attn_implementation("eager") == "eager"
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:
        with pytest.raises(ValueError, match="flash-attn package does not import"):
            resolve_attn_implementation("flash_attention_2")


def test_gradient_checkpointing_and_pixel_bounds(tiny_vlms, tmp_path):
    model = build(
        tmp_path,
        f"model.name_or_path={tiny_vlms['qwen2_vl']}",
        "model.fusion.gradient_checkpointing=true",
        "model.preprocessor.image_size=112",
        "model.preprocessor.max_pixels=3136",
        "model.preprocessor.min_pixels=3136",
    )
    assert getattr(model.backbone.base_model(), CHECKPOINTING)
    # Lightning does not call train(): the modules must come in training mode, or Transformers skips checkpointing
    assert all(module.training for module in model.modules())
    batch = batch_of(model, size=2)
    assert batch["image_grid_thw"].tolist() == [[1, 4, 4]] * 2  # 112×112 bounded to 56×56 px: 4×4 patches of 14
    vision_output = []
    model.backbone.base_model().model.visual.register_forward_hook(lambda module, args, output: vision_output.append(output))
    loss_of(model, batch).backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad and "lora_B" in n)
    (output,) = vision_output
    tensor = output if isinstance(output, torch.Tensor) else output[0]
    assert not tensor.requires_grad  # the frozen vision tower keeps no activations for a backward it does not need
    saved_checkpointed = saved_bytes(lambda: loss_of(model, batch))
    model.eval()  # what fit saw while from_pretrained's eval mode was kept: Transformers checkpoints only in training
    assert saved_checkpointed < 0.5 * saved_bytes(lambda: loss_of(model, batch))

    tuned = build(
        tmp_path,
        f"model.name_or_path={tiny_vlms['qwen2_vl']}",
        "model.fusion.gradient_checkpointing=true",
        "model.fusion.vision_lora=true",
        "model.preprocessor.image_size=56",
    )
    loss_of(tuned, batch_of(tuned, size=2)).backward()
    vision_lora = [p for n, p in tuned.named_parameters() if "lora_B" in n and "visual" in n]
    assert vision_lora and all(p.grad is not None for p in vision_lora)

    larger = build(
        tmp_path,
        f"model.name_or_path={tiny_vlms['qwen2_vl']}",
        "model.preprocessor.image_size=112",
        "model.preprocessor.max_pixels=12544",
        "model.preprocessor.min_pixels=12544",
    )
    assert batch_of(larger, size=1)["image_grid_thw"].tolist() == [[1, 8, 8]]


def test_memes_without_images_still_run_the_vision_tower(tiny_vlms, tmp_path):
    """Under ZeRO-3 every rank must gather the vision tower's weights on every step: an image-less meme
    gets a placeholder image instead of leaving its rank out of the vision forward."""
    model = build(tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}")
    calls = []
    vision = model.backbone.base_model().model.visual
    handle = vision.register_forward_hook(lambda *_: calls.append(1))
    samples = [{"id": f"t{i}", "text": "words only", "image": None, "labels": {h: 0 for h in model.heads}, "lang": "en"} for i in range(3)]
    batch = model.preprocessor.collate([model.preprocessor(s) for s in samples])
    assert "pixel_values" in batch
    with torch.no_grad():
        model(batch)
    handle.remove()
    assert calls == [1]


@pytest.mark.parametrize("mode", ["head", "verbalizer"])
def test_scores_and_trains_with_every_parameter_in_bf16(mode, tiny_vlms, tmp_path):
    """DeepSpeed's bf16 casts every parameter and the batch's floating tensors to bf16 (no autocast): the
    heads take the backbone's features in their own dtype, and the loss is computed in float32."""
    model = build(tmp_path, f"model.name_or_path={tiny_vlms['qwen2_vl']}", f"model.fusion.mode={mode}").to(torch.bfloat16)
    batch = {k: v.to(torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for k, v in batch_of(model).items()}
    logits = model(batch)
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in logits.values())
    loss = model.heads_loss(logits, batch["labels"])
    loss.backward()
    assert any(p.grad is not None for n, p in model.named_parameters() if "lora_" in n)


def test_a_trained_tower_trains_beside_lora_and_travels_in_the_adapter(tiny_vlms, tmp_path):
    """PEFT freezes every weight that is not LoRA's: `freeze_vision=false` makes the tower and projector PEFT's
    `modules_to_save`, so they train and the exported adapter holds them (a fresh base with it scores the same)."""
    folder = f"model.name_or_path={tiny_vlms['qwen2_vl']}"
    model = build(tmp_path, folder, "model.fusion.freeze_vision=false")
    tower = {n for n, p in model.named_parameters() if p.requires_grad and ".visual." in n and "lora_" not in n}
    assert tower and model.backbone.vision_cache is None
    batch = batch_of(model)
    optimizer = torch.optim.AdamW(model.parameter_groups(), lr=5e-3)
    for _ in range(3):
        optimizer.zero_grad()
        loss_of(model, batch).backward()
        optimizer.step()
    exported = adapter_folder.save(model, tmp_path / "adapter")
    fresh = build(tmp_path, folder, "model.fusion.lora=null")
    model.eval(), fresh.eval()
    with torch.no_grad():
        adapter_folder.load(fresh, exported, {"base_model": "the tiny VLM"})
        for head, logits in model(batch).items():
            torch.testing.assert_close(fresh(batch)[head], logits, rtol=0, atol=0)
    with pytest.raises(Exception, match="vision_lora=true adapts a frozen vision tower"):
        build(tmp_path, folder, "model.fusion.freeze_vision=false", "model.fusion.vision_lora=true")
