"""Reports across runs: cross-validation folds, seeds, culture transfer and zero-shot runs side by side.
They read run files only; nothing here trains or scores.
"""
