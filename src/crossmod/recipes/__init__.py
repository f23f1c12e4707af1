"""The jobs, one module each with its `main` (Hydra, or argparse for `prepare`): what `crossmod <job>` and the
checkout's root scripts run."""
