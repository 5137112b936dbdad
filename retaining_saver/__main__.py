"""`python -m retaining_saver`: the command line, as the `retaining-saver` script runs it."""

import sys

from retaining_saver.cli import main

sys.exit(main())
