"""Processes on one machine share its cores: each computes on its share, not on all of them.

torch starts one compute thread per core in every process. Ranks of a CPU run on one node (or a rank beside its
siblings on a GPU node) then run cores × ranks threads on the cores: under a shared load a step took 9–12 s where
one thread per process took 1–1.3 s. A run's intra-op threads are the cores it may use divided by the processes
of the run on its node, unless the user set `OMP_NUM_THREADS` (then torch's reading of it stands). Where a
scheduler already bound the process to fewer cores than the machine has (SLURM's task binding, taskset), those are
its share. The count is recorded in metrics.json (`environment.threads`): it moves float sums in the last bits
(docs/reproducibility.md).
"""

from __future__ import annotations

import os

import torch


def cores_available() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def share_cores(processes_on_node: int) -> int:
    """Set (and return) this process's intra-op threads: its share of the node's cores."""
    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    cores = cores_available()
    bound = cores < (os.cpu_count() or cores)  # a scheduler gave this process its cores already
    threads = cores if bound else max(1, cores // max(1, processes_on_node))
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads
