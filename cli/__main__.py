"""Run the CLI as ``python -m popmq.cli``."""

import sys

from popmq.cli.main import main

sys.exit(main())
