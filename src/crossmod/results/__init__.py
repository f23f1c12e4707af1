"""What one run's scores are: which memes each split scores, the baselines beside them, a second dataset
(`eval_data=`), the per-culture table, the figures, and the evaluate job's body. Every score itself is a pure
function in crossmod.evaluation; this room only chooses memes and writes what a person reads.
"""
