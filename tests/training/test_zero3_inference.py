"""Zero-shot generation under DeepSpeed ZeRO-3 on two CPU ranks (gloo): the tiny Qwen2-VL is built straight into
partitions, ranks answer an odd number of memes (one rank pads) whose answers end at different lengths, and the
answers equal a single process's. Sharded forwards are collectives: a rank that stopped early or ran out of memes
while the other still generates would hang the job (the test's timeout), not pass."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from crossmod.runtime.resolvers import tiny_vlm
from tests.conftest import TrainRun
from tests.data.sources import layouts

pytestmark = pytest.mark.slow

LANGUAGES = ("en", "de", "es")  # 7 memes each: 21, an odd number for two ranks


def _answers(run: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(open(run / "zeroshot" / "answers.csv")))


def _stopping_early(folder: str, generations: list[str], out: Path) -> Path:
    """A copy of the model whose end-of-sequence tokens are those whose text some answers contain and others do not,
    so answers stop at different lengths (random weights rarely end by themselves)."""
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    pieces = {token: tokenizer.decode([token]) for token in range(len(tokenizer))}
    stops = [
        t
        for t, text in pieces.items()
        if text.strip() and "\ufffd" not in text and 0 < sum(text in g for g in generations) < len(generations)
    ]
    assert stops, generations
    shutil.copytree(folder, out)
    config = json.loads((out / "generation_config.json").read_text())
    eos = config.get("eos_token_id")
    config["eos_token_id"] = [*(eos if isinstance(eos, list) else [eos] if eos is not None else []), *stops]
    (out / "generation_config.json").write_text(json.dumps(config))
    return out


def test_zero3_ranks_generate_in_lockstep_what_one_process_answers(data_dir, tmp_path):
    raw = layouts.multi3hate(tmp_path / "raw", memes=7, languages=LANGUAGES)
    folder = tiny_vlm(str(data_dir / "assets" / "tiny-qwen2_vl-synthetic"), "qwen2_vl")
    train_run = TrainRun(data_dir, tmp_path / "runs")
    runs = train_run.log_dir / "qwen_zeroshot" / "runs"
    common = ("experiment=qwen_zeroshot", f"data.raw_dir={raw}", "model.preprocessor.image_size=56")
    common += ("zeroshot.prompts=[0]", "zeroshot.max_new_tokens=16", "zeroshot.batch_size=1")

    train_run(*common, f"model.name_or_path={folder}", script="zeroshot.py", env={"CROSSMOD_RUN_ID": "probe"})
    stopping = _stopping_early(folder, [r["generation"] for r in _answers(runs / "probe")], tmp_path / "stopping")
    train_run(*common, f"model.name_or_path={stopping}", script="zeroshot.py", env={"CROSSMOD_RUN_ID": "one"})
    sharded = train_run(
        *common,
        f"model.name_or_path={stopping}",
        "trainer=ddp_cpu",
        "strategy=deepspeed_zero3",
        # every parameter gathered at every forward (a tiny model's tensors are all below the persistence threshold,
        # which would keep them whole after the first forward: no collectives left to fall out of step)
        "trainer.strategy.config.zero_optimization.stage3_param_persistence_threshold=0",
        script="zeroshot.py",
        env={"CROSSMOD_RUN_ID": "zero3"},
        timeout=600,
    )
    log = sharded.stdout + sharded.stderr
    assert "MEMBER: 2/2" in log and "built in ZeRO-3 partitions across 2 ranks" in log

    one, zero3 = _answers(runs / "one"), _answers(runs / "zero3")
    assert [r["tokens"] for r in one] == [r["tokens"] for r in zero3]
    assert len(one) == 21 and [r["id"] for r in one] == [r["id"] for r in zero3]  # every meme once, the padding dropped
    # one meme per batch, dealt to the ranks in turn (EqualShares; rank 1 pads with the first meme): at some step the
    # ranks' answers take different numbers of tokens, so ranks not held in lockstep would fall out of step
    lengths = [int(r["tokens"]) for r in one]
    rank0, rank1 = lengths[0::2], [*lengths[1::2], lengths[0]]
    assert any(a != b for a, b in zip(rank0, rank1)), lengths
    for a, b in zip(one, zero3):
        assert (a["generation"], a["prediction"]) == (b["generation"], b["prediction"]), a["id"]
        assert float(a["p_hate"]) == pytest.approx(float(b["p_hate"]), abs=1e-5)
