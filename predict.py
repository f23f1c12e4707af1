"""Score new memes with an exported culture folder from a checkout: `python predict.py …` is `crossmod predict …` (crossmod/recipes/predict.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["predict", *sys.argv[1:]]))
