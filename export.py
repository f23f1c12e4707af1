"""Export a run's cultures as shippable folders from a checkout: `python export.py …` is `crossmod export …` (crossmod/recipes/export.py)."""

from crossmod.recipes.export import main

if __name__ == "__main__":
    main()
