"""Convert a dataset to shards without training, from a checkout: `python prepare.py …` is `crossmod prepare …`
(crossmod/recipes/prepare.py)."""

from crossmod.recipes.prepare import main

if __name__ == "__main__":
    main()
