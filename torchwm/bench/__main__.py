"""``python -m torchwm.bench ...``: exactly ``torchwm bench ...`` (one parser, one-line errors), and
``python -m torchwm.bench --serve JOB``, a measuring child (`torchwm.bench.child`).

The command line is `torchwm.cli`'s, which imports the bench package; this entry point sits above both.
"""

import json
import sys

if sys.argv[1:2] == ["--serve"]:
    from torchwm.bench.child import serve

    serve(json.loads(sys.argv[2]))
else:
    from torchwm.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
