"""What a run leaves and ships: run folders and their files, exported culture folders (cards, bases,
weights), the one loader `load(reference)`, consolidated DeepSpeed checkpoints and retrieval databases. No scores
are computed here beyond loading what scores them.
"""
