"""Scoring memes with a trained classifier through Lightning's predict loop, the new memes `crossmod
predict` reads and the file it writes, and the retrieval bank a retrieval classifier answers from. No training,
no run folders, no prompting.
"""
