"""`python -m crossmod <job> …`: the `crossmod` command."""

import sys

from crossmod.cli import main

if __name__ == "__main__":  # not when a spawned process imports the parent's main module as __mp_main__
    sys.exit(main())
