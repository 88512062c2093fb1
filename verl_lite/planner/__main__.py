"""`python -m verl_lite.planner`: the memory planner's command line (cli.py)."""

import sys

from verl_lite.planner.cli import main

sys.exit(main())
