"""Cross-validate an experiment, one process per fold from a checkout: `python cross_validate.py …` is `crossmod cv …` (crossmod/recipes/cross_validate.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["cv", *sys.argv[1:]]))
