"""Train an experiment from a checkout: `python train.py …` is `crossmod train …` (crossmod/recipes/train.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["train", *sys.argv[1:]]))
