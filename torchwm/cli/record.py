"""``torchwm record``: record N episodes of a setup to a Minari dataset (`torchwm.integrations.minari`).

The env is built as ``torchwm run`` builds it (a config file, a shipped config's name or an env id, with
``--set``), with seeded autoresets on, so that every recorded episode replays from its seed. The policy
is random (seeded ``action_space.sample()``) or ``--policy module:function`` (``policy(obs,
action_space) -> actions``). Exactly ``--episodes`` episodes are written: the first to end; stepping
stops once they have, and episodes that end in the same step beyond them are not added. Bad values
(fewer than 1 episode, a malformed or existing dataset id without ``--overwrite``, an unknown policy, a
missing ``[minari]`` extra) are one line, exit 2, before any env is built. A Ctrl-C, while recording or
while writing, or a failed write leaves no dataset (with ``--overwrite``, the old one is already gone).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from typing import Any

import numpy as np
from tqdm import tqdm

from torchwm.cli.common import positive_int
from torchwm.cli.setup import add_setup_arguments, build_envs, load_policy, load_setup
from torchwm.command_line import EXIT_INTERRUPTED, EXIT_OK, Commands, UsageError
from torchwm.multiagent.spec import MultiAgentSpec
from torchwm.rollout import Result, policy_actions, rollout


def register(commands: Commands) -> None:
    parser = commands.add_command(
        "record", "record episodes of a config or an env id to a Minari dataset", cmd_record
    )
    parser.add_argument("--episodes", type=positive_int, required=True, help="episodes to record")
    parser.add_argument(
        "--dataset-id", required=True, help="Minari dataset id, (namespace/)name-vN, e.g. pong/random-v0"
    )
    parser.add_argument("--policy", metavar="MODULE:FUNCTION", help="policy(obs, action_space) -> actions")
    parser.add_argument("--overwrite", action="store_true", help="replace a local dataset of that id")
    add_setup_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def cmd_record(args: argparse.Namespace) -> int:
    integration = _minari()  # a missing extra: one line, before anything else
    import minari
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(args.dataset_id)
    except ValueError as exc:
        raise UsageError(f"--dataset-id: {exc}") from exc
    if args.dataset_id in minari.list_local_datasets() or _dataset_path(args.dataset_id).exists():
        if not args.overwrite:
            raise UsageError(
                f"--dataset-id {args.dataset_id}: a local dataset has this id "
                f"({_dataset_path(args.dataset_id)}); "
                f"pass --overwrite to replace it, or choose another id"
            )
    policy = load_policy(args.policy) if args.policy else None
    spec, _ = load_setup(args)
    if isinstance(spec, MultiAgentSpec):
        raise UsageError(
            f"{args.target}: torchwm record records single-agent envs to Minari datasets; this config "
            f"describes a multi-agent setup ([multiagent] table), which Minari does not hold"
        )
    began = time.perf_counter()
    envs = integration.VectorDataCollector(build_envs(spec), max_episodes=args.episodes)
    print(
        f"torchwm record: {spec.id} x {spec.num_envs} envs on {spec.backend} "
        f"(autoreset {spec.autoreset_mode}, seed {spec.seed}), {args.episodes} episodes",
        file=sys.stderr,
        flush=True,
    )
    progress = tqdm(
        total=args.episodes, unit="episode", file=sys.stderr, disable=args.no_progress, mininterval=0.5
    )
    steps = 0
    try:
        steps = _record(envs, spec, args.episodes, policy, progress)
    except KeyboardInterrupt:
        print("torchwm record: interrupted; no dataset written", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        progress.close()
        envs.close()
    if args.overwrite and _dataset_path(args.dataset_id).exists():
        minari.delete_dataset(args.dataset_id)
    with warnings.catch_warnings():
        # Minari warns for each piece of metadata not given (author, code_permalink, ...): not the user's
        # doing here.
        warnings.filterwarnings(
            "ignore", message=r".*(is set to None|env_spec is None)", category=UserWarning
        )
        try:
            dataset = envs.create_dataset(
                args.dataset_id,
                algorithm_name=args.policy or "random",
                description=f"torchwm record {args.target}: {spec.id} x {spec.num_envs} on {spec.backend}",
            )
        except KeyboardInterrupt:
            # create_dataset removed what it had written: the id is free for the next run.
            print("torchwm record: interrupted while writing; no dataset written", file=sys.stderr)
            return EXIT_INTERRUPTED
    seconds = time.perf_counter() - began
    print(
        f"torchwm record: wrote {dataset.total_episodes} episodes ({dataset.total_steps} steps) of {spec.id} "
        f"to {args.dataset_id} ({dataset.spec.data_path}) in {steps} vector steps, {seconds:.1f} s"
    )
    return EXIT_OK


def _record(envs: Any, spec: Any, episodes: int, policy: Any, progress: Any) -> int:
    """Step until ``episodes`` episodes have ended; the vector steps taken."""
    steps, shown = 0, 0

    def counted(result: Result) -> np.ndarray:
        # The collector keeps the episodes' rows; the progress bar counts those it has.
        nonlocal steps, shown
        steps += 1
        progress.update(envs.num_episodes - shown)
        shown = envs.num_episodes
        return result.env_ids[np.asarray(result.terminations) | np.asarray(result.truncations)]

    rollout(envs, policy_actions(envs, spec, policy), counted, lambda: envs.num_episodes >= episodes)
    return steps


def _minari() -> Any:
    try:
        import torchwm.integrations.minari as integration
    except ImportError as exc:
        from torchwm.extras import missing_extra

        raise missing_extra("minari", "torchwm record") from exc
    return integration


def _dataset_path(dataset_id: str) -> Any:
    from minari.storage.datasets_root_dir import get_dataset_path

    return get_dataset_path(dataset_id)
