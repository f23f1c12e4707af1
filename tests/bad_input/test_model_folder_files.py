"""Files of a VLM folder or a zero-shot run that are the wrong shape stop with the file, the place and the fix:
a zero-shot `answers.csv` row whose prediction is not a number, a `config.json` that is not a JSON object,
and a chat template that Transformers' sandbox refuses (raised when the preprocessor is built, in the
main process, naming the template's file; not a raw jinja error from a loader worker)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from crossmod.reports.transfer import read_zeroshot_answers
from tests.conftest import ROOT


def test_a_non_numeric_prediction_in_answers_csv_names_file_and_row(tmp_path):
    path = tmp_path / "zeroshot" / "answers.csv"
    path.parent.mkdir()
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["prompt", "id", "p_hate", "prediction"])
        writer.writeheader()
        writer.writerow({"prompt": "0", "id": "m1", "p_hate": "0.9", "prediction": "1"})
        writer.writerow({"prompt": "0", "id": "m2", "p_hate": "0.2", "prediction": "hate"})
    with pytest.raises(ValueError, match=rf"{path}, row 3: prediction 'hate' is not 0, 1 or empty.*crossmod zeroshot"):
        read_zeroshot_answers(path)


@pytest.mark.parametrize(
    "content", ['["model_type", "qwen2_vl"]', '"qwen2_vl"', '{"model_type": ["qwen2_vl"]}'], ids=["list", "string", "list-value"]
)
def test_a_vlm_config_that_is_not_an_object_is_a_clear_error(content, tmp_path):
    from crossmod.models.vlm.families import family_for

    folder = tmp_path / "vlm"
    folder.mkdir()
    (folder / "config.json").write_text(content)
    with pytest.raises(
        ValueError, match=rf"{folder / 'config.json'}: .*Transformers checkpoint's config.json is an object with a model_type string"
    ):
        family_for(str(folder))


def test_a_chat_template_the_sandbox_refuses_names_its_file(tmp_path):
    from crossmod.models.tiny.vlm import build_tiny_vlm
    from crossmod.models.vlm.preprocess import VLMPreprocessor

    folder = Path(build_tiny_vlm(tmp_path / "vlm", ["a meme about cats", "hello world"]))
    template = folder / "chat_template.jinja"
    assert template.is_file()
    template.write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")  # what the sandbox exists to refuse
    prompt = OmegaConf.to_container(OmegaConf.load(ROOT / "configs/model/vlm.yaml").prompt)
    with pytest.raises(ValueError, match=rf"{template}: the chat template cannot be rendered .*SecurityError"):
        VLMPreprocessor({"US": {"kind": "binary"}}, str(folder), json.loads(json.dumps(prompt)), family="qwen2_vl")


def test_few_shot_and_tag_prompts_render_through_the_same_guard(tmp_path):
    """The few-shot generator (and MemeBridge, the tag generator) render chats with the same named-file error."""
    from crossmod.inference.scoring import single_device_trainer
    from crossmod.models.tiny.vlm import build_tiny_vlm
    from crossmod.prompting.fewshot_prompts import FewShotGenerator

    folder = Path(build_tiny_vlm(tmp_path / "vlm", ["a meme about cats", "hello world"]))
    template = folder / "chat_template.jinja"
    template.write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    generator = FewShotGenerator(str(folder), single_device_trainer(), family="qwen2_vl")
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "hateful?"}]}]
    with pytest.raises(ValueError, match=rf"{template}: the chat template cannot be rendered .*SecurityError"):
        generator.render(messages, 1)
