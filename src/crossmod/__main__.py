"""`python -m crossmod <job> …`: the `crossmod` command."""

import sys

from crossmod.cli import main

sys.exit(main())
