"""``python -m torchwm.bench ...``: exactly ``torchwm bench ...`` (one parser, one-line errors), and
``python -m torchwm.bench --serve JOB``, a measuring child (`torchwm.bench.child`).

An entry point, as ``torchwm`` is: it runs the command line (`torchwm.cli`), which stands on this package,
and nothing imports it.
"""

import json
import sys

if sys.argv[1:2] == ["--serve"]:
    from torchwm.bench.child import serve

    serve(json.loads(sys.argv[2]))
else:
    from torchwm.cli import main

    sys.exit(main(["bench", *sys.argv[1:]]))
