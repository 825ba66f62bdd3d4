"""`python -m selfhost ...`: the same entry as `lantern engine serve ...`."""

import sys

from selfhost.server import main

raise SystemExit(main(sys.argv[1:]))
