"""Convert a dataset to shards without training, from a checkout: `python prepare.py …` is `crossmod prepare …`
(crossmod/recipes/prepare.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["prepare", *sys.argv[1:]]))
