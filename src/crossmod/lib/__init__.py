"""The library layer under the jobs (crossmod.recipes): loading trained models (`loading.load`), scoring and
prediction, checkpoints and strategies, run folders, SLURM, callbacks, reports, redaction and the console.

Importing it (every entry point does, before torch) sets OpenMP's wait policy to PASSIVE unless the user chose one:
OpenMP's idle threads then sleep instead of spinning on a core between parallel regions, so a training beside
another on the same cores does not burn the other's share while it waits (bench/shared_cores.py measures both
policies, alone and side by side). It must be set before torch loads OpenMP, hence here. It moves no number: the
thread count, and so every float sum's order, stays what src/crossmod/lib/threads.py sets.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
