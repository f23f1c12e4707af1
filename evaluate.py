"""Evaluate runs or exported cultures on a dataset from a checkout: `python evaluate.py …` is `crossmod evaluate …` (crossmod/recipes/evaluate.py)."""

from crossmod.recipes.evaluate import main

if __name__ == "__main__":
    main()
