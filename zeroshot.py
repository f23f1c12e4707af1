"""Answer memes zero-shot with a VLM from a checkout: `python zeroshot.py …` is `crossmod zeroshot …` (crossmod/recipes/zeroshot.py)."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # through the one front door: --help and the override checks answer before torch loads
    sys.exit(main(["zeroshot", *sys.argv[1:]]))
