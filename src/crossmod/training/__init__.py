"""Training runs: the pipeline `crossmod train` runs, its Lightning callbacks, SLURM preemption, how a
fold picks its weights, run status and offline W&B files.
"""
