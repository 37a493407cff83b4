"""Optional dependencies (extras) and the one-line hint that installs a missing one from this checkout.

The core install has what ``import torchwm``, the built-in backends, config
files and ``torchwm run`` need; ``[plot]`` (matplotlib), ``[render]``
(pygame, to render classic-control envs) and ``[torch]`` are extras. The name
``torchwm`` on the package registry belongs to another project, so a hint
never names the registry's project: it names the directory (or wheel)
this torchwm was installed from, which pip records in ``direct_url.json``.
"""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from urllib.parse import unquote, urlparse

from torchwm.errors import TorchwmError

EXTRAS = {
    "minari": "minari and h5py",
    "pettingzoo": "PettingZoo",
    "plot": "matplotlib",
    "render": "pygame",
    "rllib": "Ray RLlib's packages",
    "torch": "torch",
    "sb3": "stable-baselines3",
    "tianshou": "tianshou",
    "torchrl": "torchrl",
    "video": "moviepy",
}


class MissingExtraError(TorchwmError, ImportError):
    """An optional dependency is not installed; the message names the extra and the command."""


def install_source() -> str:
    """Where this torchwm was installed from (a checkout directory or a wheel file), for a pip command.

    Falls back to the checkout this module lives in, then to a placeholder: never the registry's name.
    """
    # The first torchwm that pip installed from a URL; an in-tree build's torchwm.egg-info on sys.path
    # (the current directory is a checkout) has none and is passed over.
    text = next(
        (
            t
            for d in importlib.metadata.distributions(name="torchwm")
            if (t := d.read_text("direct_url.json"))
        ),
        None,
    )
    if text:
        url = json.loads(text).get("url", "")
        if url.startswith("file://"):
            return unquote(urlparse(url).path)
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return str(checkout)
    return "<your torchwm checkout>"


def install_command(extra: str) -> str:
    """``pip install "<this checkout>[extra]"``: installs the extra together with this torchwm."""
    return f'pip install "{install_source()}[{extra}]"'


def missing_extra(extra: str, needed_by: str) -> MissingExtraError:
    """The one-line error for ``needed_by`` when the ``extra``'s package is missing.

    Example:
        >>> from torchwm.extras import missing_extra
        >>> str(missing_extra("plot", "torchwm bench --plot")).startswith(
        ...     "torchwm bench --plot needs matplotlib"
        ... )
        True
    """
    return MissingExtraError(
        f"{needed_by} needs {EXTRAS[extra]}, which is in torchwm's [{extra}] extra: {install_command(extra)}"
    )
