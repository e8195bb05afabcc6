"""``python -m alchemist.sweep SWEEP_DIR``: the sweep's driver (:mod:`alchemist.sweep.driver`)."""

import sys

from alchemist.sweep.driver import main

sys.exit(main())
