"""``python -m torchwm.cli``: the ``torchwm`` command, as ``python -m torchwm`` runs it."""

import sys

from torchwm.cli import main

sys.exit(main())
