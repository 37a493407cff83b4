"""What the forkserver does once, before it forks any worker: load the plugin registries.

A worker builds its envs through the registries (the env source and the wrappers are plugins). Loading
them reads every installed distribution's entry points and imports the plugins, a large share of a
worker's start: done here, every worker the forkserver forks inherits them instead of loading them
again. The forkserver imports this module after the others of `processes.FORKSERVER_PRELOAD`.
"""

from torchwm.plugins import registry

try:
    registry("source")
except Exception:  # noqa: BLE001 - a worker that needs the registries loads them and reports the error
    pass
