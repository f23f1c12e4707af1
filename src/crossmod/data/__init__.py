"""Data side of crossmod: the Sample record, sources, shards, folds and the streaming datamodule."""
