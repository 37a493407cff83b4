"""What ``torchwm run`` prints when it ends: steps per second and the episodes.

The learner's episodes (what the vector env returns, across autoresets: `EpisodeTracker`) are counted
apart from the whole games ``episode_statistics`` records on the env the source makes (on Atari, a game
across lives on the raw score), and each length is said in its unit (steps, ALE steps or emulator frames).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import gymnasium
import numpy as np

from torchwm.spec import EPISODE_STATISTICS


@dataclasses.dataclass
class EpisodeTracker:
    """Per-env returns and lengths across autoresets, and the episodes that finished.

    Under ``next_step`` autoreset the step after an episode ends is the reset step of that env:
    its reward (0) and flags belong to no episode, so that row is skipped once.

    Over the ``agents`` layout of `torchwm.multiagent` (``agent_names``: the env's agents; rows are the
    agents of each env, env-major) an env's episode ends when all its rows end (the layout ends them
    together; a dead agent's row ends earlier), its return is the sum over its agents, and each agent's
    return is kept in ``finished_agent_returns``, as `torchwm.evaluate` keeps them.
    """

    num_envs: int
    autoreset_mode: str = "next_step"
    agent_names: tuple[str, ...] = ()
    returns: np.ndarray = dataclasses.field(
        init=False
    )  # each env's running return (over its agents: their sum)
    lengths: np.ndarray = dataclasses.field(init=False)
    agent_returns: np.ndarray = dataclasses.field(
        init=False
    )  # (num_envs, agents): each agent's running return
    finished_returns: list[float] = dataclasses.field(default_factory=list)
    finished_lengths: list[int] = dataclasses.field(default_factory=list)
    finished_agent_returns: list[np.ndarray] = dataclasses.field(default_factory=list)
    _resetting: np.ndarray = dataclasses.field(init=False)

    @property
    def rows_per_env(self) -> int:
        return len(self.agent_names) or 1

    def __post_init__(self) -> None:
        self.returns = np.zeros(self.num_envs, dtype=np.float64)
        self.agent_returns = np.zeros((self.num_envs, self.rows_per_env), dtype=np.float64)
        self.lengths = np.zeros(self.num_envs, dtype=np.int64)
        self._resetting = np.zeros(self.num_envs, dtype=np.bool_)

    def update(self, rewards: Any, terminations: Any, truncations: Any, env_ids: Any = None) -> np.ndarray:
        """Add one vector step, whose rows are the envs ``env_ids`` (every env, in order, by default: a
        partial batch's ``infos["env_id"]`` says which; over the agents layout each env's agents' rows);
        returns which envs of ``env_ids`` ended an episode on it."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, dtype=np.int64)
        shape = (len(ids), self.rows_per_env)
        live = ~self._resetting[ids]
        row_rewards = np.asarray(rewards, dtype=np.float64).reshape(shape)[live]
        self.agent_returns[ids[live]] += row_rewards
        self.returns[ids[live]] += row_rewards.sum(axis=1)
        self.lengths[ids[live]] += 1
        rows_done = np.asarray(terminations, dtype=np.bool_) | np.asarray(truncations, dtype=np.bool_)
        done = rows_done.reshape(shape).all(axis=1) & live
        for i in ids[done]:
            self.finished_returns.append(float(self.returns[i]))
            self.finished_agent_returns.append(self.agent_returns[i].copy())
            self.finished_lengths.append(int(self.lengths[i]))
        self.returns[ids[done]] = 0.0
        self.agent_returns[ids[done]] = 0.0
        self.lengths[ids[done]] = 0
        if self.autoreset_mode == "next_step":
            # The next row of an env that ended is its reset row, whenever that env comes back.
            self._resetting[ids] = done
        return done

    def mean_agent_returns(self) -> dict[str, float]:
        """Each agent's return, the mean over the finished episodes (empty before one finished, or for
        single-agent envs)."""
        if not self.agent_names or not self.finished_agent_returns:
            return {}
        means = np.mean(np.stack(self.finished_agent_returns), axis=0)
        return {agent: float(mean) for agent, mean in zip(self.agent_names, means, strict=True)}


@dataclasses.dataclass
class RunReport:
    """What ``torchwm run`` measured: the steps, the timing window, the learner's episodes and the recorded
    ones.

    ``games`` are the (return, length) pairs ``episode_statistics`` recorded in ``infos["episode"]``
    (``infos["final_info"]["episode"]`` under ``same_step``): on the env the source makes, so on Atari a
    whole game across lives on the raw score, its length in that env's steps. ``tracker`` sums what the
    learner sees (a life each under ``episodic_life``, clipped under ``clip_reward``).
    """

    spec: Any
    tracker: EpisodeTracker
    steps: int = 0
    env_steps: int = 0  # rows returned: steps x num_envs, or fewer under batch_size < num_envs
    started: float | None = None  # the clock after the first reset: the timing window starts here
    ended: float | None = None
    startup: float = 0.0  # building the env and its first reset
    games: list[tuple[float, int]] = dataclasses.field(default_factory=list)

    @property
    def records_games(self) -> bool:
        # A multi-agent setup has no wrapper stack.
        return any(w.name == EPISODE_STATISTICS for w in getattr(self.spec, "wrappers", ()))

    def update(
        self, rewards: Any, terminations: Any, truncations: Any, infos: Any, env_ids: Any = None
    ) -> np.ndarray:
        self.steps += 1
        self.env_steps += len(rewards) // self.tracker.rows_per_env
        self.games += recorded_episodes(infos)
        return self.tracker.update(rewards, terminations, truncations, env_ids)

    @property
    def elapsed(self) -> float:
        return (self.ended - self.started) if self.started is not None and self.ended is not None else 0.0


def recorded_episodes(infos: Any) -> list[tuple[float, int]]:
    """(return, length) of each episode ``episode_statistics`` recorded in one vector step's infos."""
    found: list[tuple[float, int]] = []
    if not isinstance(infos, dict):
        return found
    final = infos.get("final_info")
    for where in (infos, final if isinstance(final, dict) else {}):
        episode, mask = where.get("episode"), where.get("_episode")
        if episode is None or mask is None:
            continue
        found += [(float(episode["r"][i]), int(episode["l"][i])) for i in np.flatnonzero(mask)]
    return found


def length_unit(spec: Any) -> str:
    """What ``episode_statistics``'s length ``l`` counts: steps of the env the source makes.

    On an ALE env those are emulator frames when it skips none (``frameskip=1``, which
    ``atari_preprocessing`` sets: its frame skip, no-op starts and FIRE resets all count).
    """
    if spec.family != "atari":
        return "steps of the env itself (below the wrappers)"
    frameskip = spec.env_kwargs.get("frameskip", 1)
    if frameskip == 1:
        return "emulator frames"
    if isinstance(frameskip, int):
        return f"ALE env steps of {frameskip} frames each"
    return f"ALE env steps (frameskip {frameskip!r})"


def _frames_per_step(spec: Any) -> int | None:
    """Emulator frames in one env step under ``atari_preprocessing`` (its frame_skip), else None."""
    pre = next((w.kwargs for w in spec.wrappers if w.name == "atari_preprocessing"), None)
    if spec.family != "atari" or pre is None or spec.env_kwargs.get("frameskip", 1) != 1:
        return None
    return int(pre["frame_skip"])


def _episode_limit(spec: Any) -> str | None:
    """The most steps an episode of the spec's env lasts (its time limit), in the learner's steps, as
    text; None when nothing says."""
    if spec.family == "multiagent":
        cycles = spec.env_kwargs.get("max_cycles")  # PettingZoo's time limit, where the env takes one
        return f"{cycles:,} steps (its max_cycles)" if type(cycles) is int and cycles > 0 else None
    if spec.family == "atari":
        frames = spec.env_kwargs.get("max_num_frames_per_episode")
        skip = _frames_per_step(spec) or spec.env_kwargs.get("frameskip", 1)
        if type(frames) is not int or frames <= 0 or type(skip) is not int:
            return None
        return f"{frames // skip:,} steps ({frames:,} emulator frames, ALE's max_num_frames_per_episode)"
    limit = spec.env_kwargs.get("max_episode_steps")
    if limit is None and spec.source == "gym":
        try:
            limit = gymnasium.spec(spec.id).max_episode_steps
        except gymnasium.error.Error:
            return None
    return f"{limit:,} steps (its max_episode_steps)" if type(limit) is int and limit > 0 else None


def _none_ended(report: RunReport) -> str:
    """Why a run saw no episode end, and what to do: how long the episodes have run, and their limit."""
    spec, tracker = report.spec, report.tracker
    said = f"no episode ended within {report.steps} steps"
    if not report.records_games:  # the learner's episodes: none ended, so each is as long as the run
        said += f" (the longest so far: {int(tracker.lengths.max()):,} steps)"
    limit = _episode_limit(spec)
    if limit:
        said += f"; an episode of {spec.id} lasts at most {limit}"
    return said + "; run more steps with --steps to see returns"


def _learner_notes(spec: Any) -> str:
    """How the learner's episodes differ from whole games, for the stack in use."""
    notes = []
    names = {w.name: w.kwargs for w in getattr(spec, "wrappers", ())}
    if "episodic_life" in names or names.get("atari_preprocessing", {}).get("terminal_on_life_loss"):
        notes.append("one per life lost")
    if "clip_reward" in names:
        notes.append("clipped rewards")
    return f" ({', '.join(notes)})" if notes else ""


def print_summary(report: RunReport, interrupted: bool) -> None:
    spec, tracker, steps, env_steps = report.spec, report.tracker, report.steps, report.env_steps
    elapsed = report.elapsed
    rate = env_steps / elapsed if elapsed > 0 else float("nan")
    per_step = (
        f"x {spec.num_envs} envs"
        if env_steps == steps * spec.num_envs
        else f"of {env_steps // steps if steps else 0} of {spec.num_envs} envs (batch_size)"
    )
    print(
        f"{'interrupted after' if interrupted else 'ran'} {steps} steps {per_step} "
        f"= {env_steps} env steps in {elapsed:.2f} s (after a start-up of {report.startup:.2f} s, not timed: "
        f"building the env and its first reset)"
    )
    frames = _frames_per_step(spec) if spec.family != "multiagent" else None
    vector_rate = steps / elapsed if elapsed > 0 else float("nan")
    if tracker.agent_names:
        print_agent_summary(report, rate, vector_rate)
        return
    print(
        f"steps per second: {rate:,.0f} env steps/s ({vector_rate:,.0f} vector steps/s"
        + (f"; {rate * frames:,.0f} emulator frames/s at {frames} frames a step" if frames else "")
        + ")"
    )
    finished = tracker.finished_returns
    if report.records_games:
        games = report.games
        what = "whole games across lives, raw score" if spec.family == "atari" else "on the env itself"
        print(f"episodes finished: {len(games)} (recorded by episode_statistics: {what})")
        if not games:
            print(_none_ended(report))
        if games:
            returns, lengths = [r for r, _ in games], [n for _, n in games]
            print(
                f"return: mean {np.mean(returns):.2f}, max {np.max(returns):.2f} "
                f"(mean length {np.mean(lengths):.1f} {length_unit(spec)})"
            )
        print(
            f"learner episodes (terminated or truncated): {len(finished)}{_learner_notes(spec)}"
            + (
                f", return mean {np.mean(finished):.2f}, mean length {np.mean(tracker.finished_lengths):.1f} "
                "steps"
                if finished
                else ""
            )
        )
    else:
        print(f"episodes finished: {len(finished)}")
        if not finished:
            print(_none_ended(report))
        if finished:
            print(
                f"return: mean {np.mean(finished):.2f}, max {np.max(finished):.2f} "
                f"(mean length {np.mean(tracker.finished_lengths):.1f} steps{_learner_notes(spec)})"
            )
    sys.stdout.flush()


def print_agent_summary(report: RunReport, rate: float, vector_rate: float) -> None:
    """The figures of a run of the ``agents`` layout: agent steps too, and each agent's mean return over the
    finished episodes beside the env's (the sum over its agents)."""
    tracker = report.tracker
    agents = len(tracker.agent_names)
    print(
        f"steps per second: {rate:,.0f} env steps/s ({rate * agents:,.0f} agent steps/s at {agents} agents "
        f"an env; {vector_rate:,.0f} vector steps/s)"
    )
    finished = tracker.finished_returns
    print(f"episodes finished: {len(finished)}")
    if not finished:
        print(_none_ended(report))
    else:
        means = ", ".join(f"{agent} {mean:.2f}" for agent, mean in tracker.mean_agent_returns().items())
        print(f"return per agent (mean over the {len(finished)} episodes): {means}")
        print(
            f"env return (sum over its agents): mean {np.mean(finished):.2f}, max {np.max(finished):.2f} "
            f"(mean length {np.mean(tracker.finished_lengths):.1f} steps)"
        )
    sys.stdout.flush()
