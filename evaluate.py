"""Evaluate runs or exported cultures on a dataset from a checkout: `python evaluate.py …` is `crossmod evaluate …` (crossmod/recipes/evaluate.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["evaluate", *sys.argv[1:]]))
