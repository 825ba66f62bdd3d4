"""`python -m selfhost ...`: the same entry as `lantern engine serve ...`.

Before torch loads, OpenMP threads are told to sleep rather than spin at barriers (unless the
caller chose otherwise): on a machine whose cores are shared, spinning threads made steps up to
10x slower in our measurements (docs/engine.md). libgomp reads this only at load time.
"""

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from selfhost.serve.server import main  # noqa: E402

raise SystemExit(main(sys.argv[1:]))
