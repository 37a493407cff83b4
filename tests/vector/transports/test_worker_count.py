"""How many workers shmem starts when the user does not say (torchwm/vector/transports/worker_count.py)."""

from __future__ import annotations

import collections
import json
import logging
import multiprocessing
import os
import subprocess
import sys
import time

import cloudpickle
import gymnasium as gym
import pytest

import torchwm
from torchwm.vector.transports import handoff_ping, worker_count
from torchwm.vector.transports.contract import default_num_workers
from torchwm.vector.transports.handoff import Handoff
from torchwm.vector.transports.worker_count import measure, measure_env_step

# The helper process gets this module's envs by value: under forkserver it may not import the test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

FAST_WAKES = Handoff(poll=2e-6, wake=10e-6)
SLOW_WAKES = Handoff(poll=2e-6, wake=150e-6)  # a VM whose wake-ups are 15x dearer


class _Counts(gym.Wrapper):
    """Keeps the seed of each reset of the env it wraps."""

    seeds: list = []

    def reset(self, **kwargs):
        type(self).seeds.append(kwargs.get("seed"))
        return super().reset(**kwargs)


class _Busy(gym.Wrapper):
    """Takes 500 µs of wall time a step (a busy loop: the Synthetic env's CPU-time loop ends early while
    BLAS threads spin after numpy's import)."""

    def step(self, action):
        end = time.perf_counter() + 0.0005
        while time.perf_counter() < end:
            pass
        return super().step(action)


def test_the_env_step_is_timed_after_a_reset_with_no_seed():
    """Unseeded: a seeded reset of an ALE env loads its ROM again, a tenth of a second of the start."""
    _Counts.seeds = []
    env = _Counts(_Busy(gym.make("CartPole-v1")))
    step = measure_env_step(env)
    assert 0.0005 <= step < 0.01
    assert len(_Counts.seeds) >= 1 and _Counts.seeds == [None] * len(_Counts.seeds)


def test_the_hand_off_and_the_env_are_measured_in_a_helper_process_once_each(monkeypatch):
    monkeypatch.setattr(worker_count, "_handoffs", {})
    monkeypatch.setattr(worker_count, "_env_steps", {})
    context = multiprocessing.get_context("forkserver")
    parent, cores = os.getpid(), os.sched_getaffinity(0)
    handoff, step = measure(context, "synthetic", _synthetic)
    assert os.sched_getaffinity(0) == cores  # pinned to one core while it pinged, then given its cores back
    assert 0 < handoff.poll < 0.01 and 0 < handoff.wake < 0.05
    assert 0.0005 <= step < 0.01
    assert not [p for p in multiprocessing.active_children() if p.name == "torchwm-measure"]
    assert os.getpid() == parent
    # Both are kept: a second env measures its step only, the same env nothing.
    assert measure(context, "synthetic", _broken) == (handoff, step)
    assert measure(context, "cartpole", lambda: gym.make("CartPole-v1"))[1] < step


def _synthetic():
    return _Busy(gym.make("CartPole-v1"))


def _broken():
    raise AssertionError("the same env is measured once")


class _Faulty(gym.Wrapper):
    """Dies, hangs or raises on its first step, as the fault-injection tests' env does on some actions."""

    fault = "raise"

    def step(self, action):
        if self.fault == "exit":
            os._exit(0)
        if self.fault == "hang":
            time.sleep(30)
        raise RuntimeError("the env broke on purpose")


@pytest.mark.parametrize("fault", ["raise", "exit", "hang"])
def test_an_env_that_raises_dies_or_hangs_while_measured_leaves_the_default_and_this_process_alone(
    monkeypatch, fault
):
    monkeypatch.setattr(worker_count, "_env_steps", {})
    monkeypatch.setattr(_Faulty, "fault", fault)
    began = time.monotonic()
    _, step = measure(
        multiprocessing.get_context("forkserver"), fault, lambda: _Faulty(gym.make("CartPole-v1"))
    )
    assert step is None  # not measured: the caller keeps one worker per core
    assert time.monotonic() - began < worker_count.STEP_DEADLINE_SECONDS + 5
    assert not [p for p in multiprocessing.active_children() if p.name == "torchwm-measure"]


def test_an_env_that_fails_while_measured_leaves_the_hand_off_to_the_next_env(monkeypatch):
    # The env is measured before the hand-off (while a forkserver imports its preload, pings would share a
    # core with it): a helper that its env took down pings no more, and that failure is the only warning.
    monkeypatch.setattr(worker_count, "_handoffs", {})
    monkeypatch.setattr(worker_count, "_env_steps", {})
    monkeypatch.setattr(_Faulty, "fault", "exit")
    context = multiprocessing.get_context("forkserver")
    with pytest.warns(RuntimeWarning) as caught:
        assert measure(context, "exit first", lambda: _Faulty(gym.make("CartPole-v1"))) == (None, None)
    assert [str(w.message).split(":")[1].strip() for w in caught] == ["an env's step could not be measured"]
    handoff, step = measure(context, "synthetic", _synthetic)
    assert handoff is not None and 0.0005 <= step < 0.01


def test_an_env_so_dear_that_no_hand_off_could_change_the_choice_measures_none(monkeypatch):
    # 16 envs of 500 µs on 2 cores: one worker per core stays fastest even with a 2 ms wake-up, so the
    # hand-off (pings that, on a first start, share a core with the forkserver's imports) is not measured.
    monkeypatch.setattr(worker_count, "_handoffs", {})
    monkeypatch.setattr(worker_count, "_env_steps", {})
    pinged = []

    def ping(helper, conn):
        pinged.append(helper.pid)
        return SLOW_WAKES

    monkeypatch.setattr(handoff_ping, "ping", ping)
    context = multiprocessing.get_context("forkserver")
    choice = worker_count.measured_worker_choice(16, 2, "dear", _synthetic, context)
    assert choice is not None and choice.workers == 2 and not choice.fallback and pinged == []
    assert "one worker per core is predicted fastest whatever the hand-off" in choice.measured
    # A cheap env's choice turns on the hand-off: it is measured, once.
    choice = worker_count.measured_worker_choice(16, 2, "cheap", lambda: gym.make("CartPole-v1"), context)
    assert choice is not None and len(pinged) == 1 and "150 µs asleep" in choice.measured


HELPER_CONTEXT = r"""
import multiprocessing, sys, threading
from torchwm.vector.transports.worker_count import helper_context

seen = [
    helper_context(multiprocessing.get_context(m)).get_start_method() for m in ("forkserver", "spawn")
]
sys.modules["torch"] = type(sys)("torch")  # torch's thread pools may be locked in a forked child
seen.append(helper_context(multiprocessing.get_context("forkserver")).get_start_method())
del sys.modules["torch"]
stop = threading.Event()
thread = threading.Thread(target=stop.wait)
thread.start()  # a fork copies no other thread, and whatever lock it held stays held in the child
seen.append(helper_context(multiprocessing.get_context("forkserver")).get_start_method())
stop.set()
thread.join()
print(" ".join(seen))
"""


def test_the_helper_is_forked_from_a_process_of_one_thread_without_torch_else_started_as_workers_are():
    # Forked, it measures while the forkserver still imports what the workers need, instead of after.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", HELPER_CONTEXT],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["fork", "fork", "forkserver", "forkserver"]


def test_an_env_too_slow_to_measure_gets_one_worker_per_core_without_a_warning(monkeypatch, recwarn):
    # A busy machine makes Pong's reset and steps outlast the deadline: a dear env, whose answer (one
    # worker per core) needs no warning on the README's `torchwm run pong`; worker_choice says why.
    monkeypatch.setattr(worker_count, "_handoffs", {})
    monkeypatch.setattr(worker_count, "_env_steps", {})
    monkeypatch.setattr(_Faulty, "fault", "hang")
    context = multiprocessing.get_context("forkserver")
    choice = worker_count.measured_worker_choice(
        4, 2, "slow", lambda: _Faulty(gym.make("CartPole-v1")), context
    )
    assert choice is not None and choice.workers == 2
    assert "its reset and steps took over 1 s (a dear env)" in choice.fallback
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]


needs_two_cores = pytest.mark.skipif(
    default_num_workers() < 2, reason="one core: one worker, nothing to choose"
)


@needs_two_cores
def test_shmem_starts_the_workers_it_measured_and_says_so(monkeypatch, caplog):
    monkeypatch.setitem(worker_count._handoffs, "forkserver", SLOW_WAKES)
    monkeypatch.setattr(worker_count, "_env_steps", collections.defaultdict(lambda: 5e-6))
    with caplog.at_level(logging.INFO, logger="torchwm"):
        vec = torchwm.make_vec("CartPole-v1", num_envs=4, backend="shmem", seed=0)
    try:
        assert vec.num_workers == vec.worker_choice.workers == 1
        assert f"shmem: 4 envs on {vec.worker_choice}" in caplog.text
        obs, _ = vec.reset(seed=0)
        with torchwm.make_vec("CartPole-v1", num_envs=4, backend="sync", seed=0) as reference:
            assert (obs == reference.reset(seed=0)[0]).all()
    finally:
        vec.close()


@needs_two_cores
@pytest.mark.parametrize("options", [{"num_workers": 2}, {"envs_per_worker": 2}, {"inline": True}])
def test_a_split_the_user_gave_is_kept_and_nothing_is_measured(monkeypatch, options):
    def must_not_measure(*args):
        raise AssertionError("measured although the user fixed the split")

    monkeypatch.setattr(worker_count, "measure", must_not_measure)
    with torchwm.make_vec("CartPole-v1", num_envs=4, backend="shmem", backend_kwargs=options) as vec:
        assert vec.worker_choice is None and vec.num_workers == 2


@needs_two_cores
def test_the_users_own_factories_are_not_built_once_more_to_measure(monkeypatch):
    built = []

    def make():
        built.append(1)
        return gym.make("CartPole-v1")

    monkeypatch.setattr(worker_count, "measure", lambda *args: pytest.fail("measured the user's own factory"))
    with torchwm.make_vec_from_fns([make] * 4, backend="shmem") as vec:
        assert vec.worker_choice is None and vec.num_workers == default_num_workers()
    assert built == []  # built in the workers only


def test_ctrl_c_while_measuring_ends_the_helper_and_gives_the_cores_back(monkeypatch):
    monkeypatch.setattr(worker_count, "_handoffs", {})
    cores = os.sched_getaffinity(0)

    def interrupted(words, rounds, sleep, helper, give_up):
        raise KeyboardInterrupt

    monkeypatch.setattr(handoff_ping, "round_trips", interrupted)
    with pytest.raises(KeyboardInterrupt):
        measure(multiprocessing.get_context("forkserver"), "synthetic", _synthetic)
    assert os.sched_getaffinity(0) == cores
    assert not [p for p in multiprocessing.active_children() if p.name == "torchwm-measure"]


# -- the measurement under the workers' deadline and registration (issue 25, items 3 and 4) ------------------


class _HangsWhenBuilt(gym.Env):
    """A constructor that never returns (within the test)."""

    def __init__(self):
        time.sleep(600)


class _BreaksOnStep(gym.Wrapper):
    def __init__(self):
        super().__init__(gym.make("CartPole-v1"))

    def step(self, action):
        raise RuntimeError("the env broke on purpose")


def _register(env_id, entry_point):
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=entry_point)
    return env_id


@needs_two_cores
def test_a_hanging_constructor_fails_make_vec_within_the_timeout_not_the_measurements_minute(monkeypatch):
    monkeypatch.setitem(worker_count._handoffs, "forkserver", SLOW_WAKES)
    monkeypatch.setattr(worker_count, "_env_steps", {})
    env_id = _register("TorchwmTest/HangsWhenBuilt-v0", _HangsWhenBuilt)
    with pytest.raises(
        torchwm.errors.EnvTimeoutError, match=r"not built within 3 s .*helper process that measures"
    ):
        torchwm.make_vec(env_id, num_envs=4, backend="shmem", backend_kwargs={"timeout": 3})
    assert not [p for p in multiprocessing.active_children() if p.name == "torchwm-measure"]
    assert not worker_count._env_steps  # nothing kept: a larger timeout measures again


@needs_two_cores
def test_an_id_registered_at_run_time_is_measured_as_the_workers_build_it(monkeypatch):
    monkeypatch.setitem(worker_count._handoffs, "forkserver", SLOW_WAKES)
    monkeypatch.setattr(worker_count, "_env_steps", {})
    # An importable entry point, registered in this process only: the helper, like the workers, gets the spec.
    env_id = _register(
        "TorchwmTest/RunTimeCartPole-v0", "gymnasium.envs.classic_control.cartpole:CartPoleEnv"
    )
    with torchwm.make_vec(env_id, num_envs=4, backend="shmem") as vec:
        assert vec.worker_choice is not None and vec.worker_choice.fallback == "", vec.worker_choice
        assert "measured: an env step" in str(vec.worker_choice)
    assert list(worker_count._env_steps.values())[0] is not None


@needs_two_cores
def test_a_failed_measurement_is_said_in_a_warning_and_in_worker_choice(monkeypatch):
    monkeypatch.setitem(worker_count._handoffs, "forkserver", SLOW_WAKES)
    monkeypatch.setattr(worker_count, "_env_steps", {})
    env_id = _register("TorchwmTest/BreaksOnStep-v0", _BreaksOnStep)
    with pytest.warns(
        RuntimeWarning, match="an env.s step could not be measured: RuntimeError: the env broke on purpose"
    ):
        vec = torchwm.make_vec(env_id, num_envs=4, backend="shmem")
    with vec:
        choice = vec.worker_choice
        assert choice is not None and "the env broke on purpose" in choice.fallback
        assert vec.num_workers == choice.workers == min(4, default_num_workers())
        assert "one per core: not measured" in str(choice)  # what torchwm bench prints under its table


@pytest.fixture
def kept_in(monkeypatch, tmp_path):
    """This process as a new program, with measurements kept in ``tmp_path``; returns a function that makes
    it a new program again (nothing measured in memory, the file read anew)."""
    monkeypatch.setenv(worker_count.CACHE_VARIABLE, str(tmp_path))

    def new_program():
        monkeypatch.setattr(worker_count, "_handoffs", {})
        monkeypatch.setattr(worker_count, "_env_steps", {})
        monkeypatch.setattr(worker_count, "_recalled", set())
        monkeypatch.setattr(worker_count, "_kept", None)

    new_program()
    return new_program


def _no_helper(*args, **kwargs):
    raise AssertionError("a helper process was started although the measurements were kept")


def test_a_later_program_on_the_same_machine_takes_the_kept_measurements_and_starts_no_helper(
    monkeypatch, kept_in, tmp_path
):
    context = multiprocessing.get_context("forkserver")
    handoff, step = measure(context, "synthetic", _synthetic)
    assert worker_count.kept_path() == str(tmp_path / "worker_count.json")
    kept_in()
    with monkeypatch.context() as patch:
        patch.setattr(worker_count, "ForkServerWorkerProcess", _no_helper)
        assert measure(context, "synthetic", _broken) == (handoff, step)
        assert worker_count.recalled("forkserver", "synthetic")
    # Another env is measured (its step only), and kept beside the first.
    assert measure(context, "cartpole", lambda: gym.make("CartPole-v1"))[0] == handoff
    assert sorted(json.loads((tmp_path / "worker_count.json").read_text())["env_steps"]) == [
        "cartpole",
        "synthetic",
    ]


def test_kept_measurements_of_another_machine_or_an_unreadable_file_are_measured_again(
    monkeypatch, kept_in, tmp_path
):
    context = multiprocessing.get_context("forkserver")
    measure(context, "synthetic", _synthetic)
    kept_in()
    monkeypatch.setattr(worker_count, "machine_key", lambda: "another machine")
    handoff, step = measure(context, "synthetic", _synthetic)  # _broken would fail: measured again
    assert handoff is not None and step is not None and not worker_count.recalled("forkserver", "synthetic")
    (tmp_path / "worker_count.json").write_text("{not json")
    kept_in()
    assert measure(context, "synthetic", _synthetic)[1] is not None
    assert json.loads((tmp_path / "worker_count.json").read_text())["machine"] == "another machine"


def test_an_empty_cache_dir_keeps_nothing(monkeypatch, kept_in, tmp_path):
    monkeypatch.setenv(worker_count.CACHE_VARIABLE, "")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert worker_count.kept_path() is None
    measure(multiprocessing.get_context("forkserver"), "synthetic", _synthetic)
    assert list(tmp_path.iterdir()) == []


@needs_two_cores
def test_shmem_says_when_its_choice_was_measured_by_an_earlier_program(kept_in):
    with torchwm.make_vec("CartPole-v1", num_envs=4, backend="shmem", seed=0) as vec:
        first = vec.worker_choice
    kept_in()
    with torchwm.make_vec("CartPole-v1", num_envs=4, backend="shmem", seed=0) as vec:
        assert vec.num_workers == first.workers
        assert (
            vec.worker_choice.measured
            == f"{first.measured}; kept from an earlier run in {worker_count.kept_path()}"
        )
