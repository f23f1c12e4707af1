"""Answer memes zero-shot with a VLM from a checkout: `python zeroshot.py …` is `crossmod zeroshot …` (crossmod/recipes/zeroshot.py)."""

from crossmod.recipes.zeroshot import main

if __name__ == "__main__":
    main()
