"""docs/concepts.md tells how one ``shmem`` step travels and how many files a reader opens for it: the
files torchwm's code runs in during a step, in the parent and in the worker, are those the page lists,
and their number is the one it states.

Each side is traced with `sys.setprofile` (every Python function entered, by file): the parent around one
``envs.step``, the worker around its envs' steps (a wrapper around the env turns the tracing on and off
and writes what it saw to a file; the ``fork`` start method, so that nothing else starts in the worker).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import cloudpickle
import gymnasium as gym
import numpy as np
import pytest

import torchwm
import torchwm.vector

ROOT = Path(__file__).resolve().parents[1]
# The torchwm that runs (the installed one under `python -P`), not necessarily the checkout's.
VECTOR = Path(torchwm.vector.__file__).resolve().parent
NUMBERS = {
    word: n
    for n, word in enumerate(
        ["four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"], start=4
    )
}

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def documented_step() -> tuple[int, set[str]]:
    """(the number of files the page states, the files its table lists), paths relative to torchwm/vector."""
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    section = page.split("### One shmem step", 1)[1].split("\n## ", 1)[0]
    stated = re.search(r"\*\*(\w+) files\*\*", section)
    assert stated is not None, "docs/concepts.md, One shmem step: no '**N files**'"
    listed = set(re.findall(r"^\| `([\w/]+\.py)` \|", section, re.MULTILINE))
    return NUMBERS[stated.group(1)], listed


def _profiler(seen: set[str]):
    def profile(frame, event, arg):
        if event == "call":
            path = Path(frame.f_code.co_filename)
            if VECTOR in path.parents:
                seen.add(path.relative_to(VECTOR).as_posix())

    return profile


class TracedSteps(gym.Wrapper):
    """Traces the worker (every torchwm function it enters) from its envs' 4th step to their 12th."""

    def __init__(self, env: gym.Env, out: str) -> None:
        super().__init__(env)
        self.out = out
        self.steps = 0
        self.seen: set[str] = set()

    def step(self, action):
        self.steps += 1
        if self.steps == 4:
            sys.setprofile(_profiler(self.seen))
        elif self.steps == 12:
            sys.setprofile(None)
            Path(self.out, f"{os.getpid()}-{id(self)}").write_text("\n".join(sorted(self.seen)))
        return self.env.step(action)


def test_the_page_states_the_number_of_files_it_lists():
    stated, listed = documented_step()
    assert len(listed) == stated
    assert all((VECTOR / name).is_file() for name in listed), listed


@pytest.mark.skipif(sys.platform != "linux", reason="the fork start method and futexes: Linux")
def test_a_shmem_step_runs_in_the_files_the_page_lists(tmp_path):
    stated, listed = documented_step()
    out = str(tmp_path)

    def make():
        return TracedSteps(gym.make("CartPole-v1"), out)

    parent: set[str] = set()
    actions = np.ones(2, dtype=np.int64)
    with torchwm.make_vec_from_fns(
        [make, make], backend="shmem", seed=0, backend_kwargs={"num_workers": 1, "context": "fork"}
    ) as envs:
        envs.reset(seed=0)
        for step in range(14):
            if step == 6:
                sys.setprofile(_profiler(parent))
            envs.step(actions)
            if step == 6:
                sys.setprofile(None)
    worker = {name for path in tmp_path.iterdir() for name in path.read_text().split()}
    assert worker, "the worker wrote nothing"
    assert parent | worker <= listed, sorted((parent | worker) - listed)
    # The five files that carry the step are opened on every step (the helpers depend on who sleeps).
    assert {"base.py", "pool_stepper.py", "transports/shared_memory.py"} <= parent
    assert {"env_group.py", "transports/shared_memory_worker.py"} <= worker


# The layers a step crosses in the parent, top first; other files under torchwm/vector are helpers a
# layer calls and that return to it (state, batching, deadlines).
CARRIERS = {"base.py": 0, "pool_stepper.py": 1}


def _carrier(path: Path) -> int | None:
    if VECTOR not in path.parents:
        return None
    name = path.relative_to(VECTOR).as_posix()
    if name in CARRIERS:
        return CARRIERS[name]
    # the transports' own modules (the parent's end and what it runs on), not their shared contract
    return 2 if name.startswith("transports/") and name != "transports/contract.py" else None


def test_a_shmem_step_goes_base_pool_transport_once_each_way():
    """No call from a lower layer back up into a higher one during a steady step (before, pool's send and
    recv called up into base, and base's recv down into pool's wait, which called back up to collect)."""
    upward: list[tuple[str, str, str]] = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_back is None:
            return
        callee = _carrier(Path(frame.f_code.co_filename))
        caller = _carrier(Path(frame.f_back.f_code.co_filename))
        if callee is not None and caller is not None and callee < caller:
            upward.append((frame.f_back.f_code.co_name, "->", frame.f_code.co_name))

    actions = np.ones(2, dtype=np.int64)
    with torchwm.make_vec(
        "CartPole-v1", 2, backend="shmem", seed=0, backend_kwargs={"num_workers": 1}
    ) as envs:
        envs.reset(seed=0)
        for step in range(10):
            if step == 5:
                sys.setprofile(profile)
            envs.step(actions)
            envs.send(actions)
            envs.recv()
            if step == 5:
                sys.setprofile(None)
    assert upward == []


def test_a_steady_shmem_step_makes_no_more_parent_calls_than_the_page_says():
    """A steady step of 2 CartPole envs on one worker, the worker done before recv: the Python calls into
    torchwm in the parent (send, then recv) are at most the number docs/concepts.md states."""
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    stated = re.search(r"makes (\d+) Python calls into torchwm in the parent", page)
    assert stated is not None
    package = VECTOR.parent
    counts: list[int] = []

    def profile(frame, event, arg):
        if event == "call" and package in Path(frame.f_code.co_filename).parents:
            counts[-1] += 1

    actions = np.ones(2, dtype=np.int64)
    # spin_seconds=0: the worker sleeps between steps, so that every send also rings it (the most calls).
    options = {"num_workers": 1, "context": "fork", "spin_seconds": 0.0}
    with torchwm.make_vec("CartPole-v1", 2, backend="shmem", seed=0, backend_kwargs=options) as envs:
        envs.reset(seed=0)
        for _ in range(20):
            counts.append(0)
            sys.setprofile(profile)
            envs.send(actions)
            sys.setprofile(None)
            while not envs._stepper._handles[0].poll():
                pass
            sys.setprofile(profile)
            envs.recv()
            sys.setprofile(None)
    steady = counts[10:]
    assert max(steady) <= int(stated.group(1)), steady


PARENT_FILES = re.compile(r"are in \*\*(\w+) files\*\* of the parent:\n(.*?)\. A step that waits", re.S)


def test_a_steady_shmem_step_whose_worker_is_done_runs_in_the_parent_files_the_page_names():
    """A steady step (after the first steps the tuner times) of 2 CartPole envs on one worker, the worker
    done when recv looks: the parent runs torchwm's code in the files docs/concepts.md names, as many as it
    says. Several steps are traced: a step where the worker had fallen asleep, or the parent had to wait,
    also enters the wait's helpers (the page says which); the steady one does not."""
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    found = PARENT_FILES.search(page)
    assert found is not None, "docs/concepts.md: no '... are in **N files** of the parent: ...'"
    named = set(re.findall(r"`([\w/]+\.py)`", found.group(2)))
    assert len(named) == NUMBERS[found.group(1)] <= 5
    helpers = {"transports/contract.py", "transports/futex.py", "transports/handoff.py"}

    actions = np.ones(2, dtype=np.int64)
    steps: list[set[str]] = []
    with torchwm.make_vec(
        "CartPole-v1", 2, backend="shmem", seed=0, backend_kwargs={"num_workers": 1, "context": "fork"}
    ) as envs:
        envs.reset(seed=0)
        worker = envs.workers[0]
        for step in range(200):
            traced = step >= 150  # the tuner's first steps are timed: not steady yet
            seen: set[str] = set()
            if traced:
                sys.setprofile(_profiler(seen))
            envs.send(actions)
            sys.setprofile(None)
            while not worker.poll():
                pass
            if traced:
                sys.setprofile(_profiler(seen))
            envs.recv()
            sys.setprofile(None)
            if traced:
                steps.append(seen)
    assert all(files <= named | helpers for files in steps), [sorted(f - named) for f in steps]
    assert min(steps, key=len) == named, sorted(min(steps, key=len))
