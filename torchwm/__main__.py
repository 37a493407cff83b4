"""``python -m torchwm``: the ``torchwm`` command (see `torchwm.cli`)."""

import sys

from torchwm.cli import main

sys.exit(main())
