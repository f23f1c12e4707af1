"""Tiny random-init model folders built on the fly: the default synthetic experiment, CPU runs and tests need no download.

One module per family (`bert`: BERT and XLM-R encoders, `clip`, `qwen_vl` …; `vlm` names every VLM kind). Each writes a complete folder
(config, random weights, a tokenizer trained on the given corpus, processors) with `save_pretrained`, so the
rest of crossmod loads it through the same `from_pretrained` path a real checkpoint takes. `folder.build_once`
makes the build safe for concurrent ranks and tests.
"""
