"""What every process shares, whatever job it runs: the one-line user errors and value checks, the console
and its progress lines, thread budgets, the accelerator strategies, the config resolvers, redaction and the
environment a run records. It imports no other room; nothing here knows a job.
"""
