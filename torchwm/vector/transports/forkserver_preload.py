"""What the forkserver does once, before it forks any worker: import torchwm's own plugin modules.

A worker builds its envs from the registry entries its payload carries (`torchwm.plugins.RegistrySnapshot`),
so it loads no plugin; unpickling those entries imports the modules that define them, torchwm's built-in
sources and wrappers above all, a large share of a worker's start. Imported here, every worker the
forkserver forks inherits them. Third-party plugins are not loaded here: the process that calls `make_vec`
has loaded them already, and loading them again would make every program pay their import twice (and a
broken one's failure twice). The forkserver imports this module after the others of
`torchwm.vector.transports.start_methods.FORKSERVER_PRELOAD`.
"""

import importlib

from torchwm.plugins import DEFAULT_PLUGINS, disabled_plugins

for _module in DEFAULT_PLUGINS:
    if _module not in disabled_plugins():
        try:
            importlib.import_module(_module)
        except Exception:  # noqa: BLE001 - a worker that needs the module imports it and reports the error
            pass
