"""Score new memes with an exported culture folder from a checkout: `python predict.py …` is `crossmod predict …` (crossmod/recipes/predict.py)."""

from crossmod.recipes.predict import main

if __name__ == "__main__":
    main()
