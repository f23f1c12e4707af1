"""Train an experiment from a checkout: `python train.py …` is `crossmod train …` (crossmod/recipes/train.py)."""

from crossmod.recipes.train import main

if __name__ == "__main__":
    main()
