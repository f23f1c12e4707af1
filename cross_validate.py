"""Cross-validate an experiment, one process per fold from a checkout: `python cross_validate.py …` is `crossmod cv …` (crossmod/recipes/cross_validate.py)."""

from crossmod.recipes.cross_validate import main

if __name__ == "__main__":
    main()
