"""How a job starts: its command line read before the job is imported, and the checks every entry point
makes before it builds anything.
"""
