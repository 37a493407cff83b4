"""``python -m torchwm.bench ...``: exactly ``torchwm bench ...`` (one parser, one-line errors: the command
`torchwm.bench.command` declares), and ``python -m torchwm.bench --serve JOB``, a measuring child
(`torchwm.bench.child`).

An entry point, as ``torchwm`` is, that imports nothing above this package: the command line (`torchwm.cli`)
stands on it, never the other way.
"""

import json
import sys

if sys.argv[1:2] == ["--serve"]:
    from torchwm.bench.child import serve

    serve(json.loads(sys.argv[2]))
else:
    from torchwm.bench.command import main

    sys.exit(main(sys.argv[1:]))
