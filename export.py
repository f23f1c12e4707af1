"""Export a run's cultures as shippable folders from a checkout: `python export.py …` is `crossmod export …` (crossmod/recipes/export.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["export", *sys.argv[1:]]))
