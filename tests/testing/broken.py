"""Backends that break one rule of the vector contract on purpose, for the tests of the conformance checks
(``tests/testing/test_checks_*.py``): each check must fail on the backend that breaks its rule and pass on
``sync``.

A broken backend is a subclass of the ``sync`` backend's `SyncVectorEnv` with one method changed, so that it
stays fast (no process) and breaks nothing else. `broken_backend` registers it under the name ``broken``
(the test's ``fresh_plugins`` fixture removes it afterwards) and gives the `BackendUnderTest` a check takes;
`check_fails` runs the check and returns its `AssertionError`'s message.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import torchwm
from torchwm import plugins
from torchwm.errors import ClosedEnvironmentError
from torchwm.testing import BackendUnderTest
from torchwm.vector.sync import SyncVectorEnv


def broken_backend(vector_env_class: type, **conformance: Any) -> BackendUnderTest:
    """``vector_env_class`` registered as the backend ``broken`` (with ``conformance`` metadata, if given)."""
    metadata = {"conformance": conformance} if conformance else {}

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("broken", vector_env_class, **metadata)

    plugins.register_plugin(Plugin(), name="broken-backend")
    return BackendUnderTest("broken")


def check_fails(check: Any, target: BackendUnderTest, match: str) -> str:
    """The message of the `AssertionError` ``check`` raises on ``target``; it must contain ``match``."""
    with pytest.raises(AssertionError) as failed:
        check(target)
    message = str(failed.value)
    assert match in message, message
    return message


# -- the broken backends, each named after the rule it breaks -----------------------------------------------


class PaysDouble(SyncVectorEnv):
    """Every reward twice what the env gave."""

    def step(self, actions, env_ids=None):
        obs, rewards, terminations, truncations, infos = super().step(actions, env_ids)
        return obs, rewards * 2, terminations, truncations, infos


class Float64Observations(SyncVectorEnv):
    """A step's observations as float64, outside the float32 observation space."""

    def step(self, actions, env_ids=None):
        obs, *rest = super().step(actions, env_ids)
        return (np.asarray(obs, dtype=np.float64), *rest)


class OneSeedForAll(SyncVectorEnv):
    """``reset(seed=s)`` seeds every env with ``s``, not env ``i`` with ``s + i``."""

    def reset(self, *, seed=None, options=None, env_ids=None):
        if isinstance(seed, int):
            seed = [seed] * (self.num_envs if env_ids is None else len(env_ids))
        return super().reset(seed=seed, options=options, env_ids=env_ids)


class FirstResetIgnoresMakeSeed(SyncVectorEnv):
    """A reset without a seed seeds with a number of its own, not ``make_vec(seed=...)``."""

    def reset(self, *, seed=None, options=None, env_ids=None):
        return super().reset(seed=12345 if seed is None else seed, options=options, env_ids=env_ids)


class NoisyObservations(SyncVectorEnv):
    """Unseeded noise on a step's observations: the same seed no longer gives the same arrays."""

    def step(self, actions, env_ids=None):
        obs, *rest = super().step(actions, env_ids)
        noise = np.random.default_rng().integers(1, 3, size=np.shape(obs)).astype(obs.dtype)
        return (obs + noise, *rest)


class TakesAnyActionCount(SyncVectorEnv):
    """Too few or too many integer actions are repeated or cut to the envs' count instead of refused."""

    def step(self, actions, env_ids=None):
        count = self.num_envs if env_ids is None else len(env_ids)
        given = np.asarray(actions)
        if given.ndim == 1 and given.shape[0] != count and given.dtype.kind in "iu":
            actions = np.resize(given, count)
        return super().step(actions, env_ids)


class ReportsWrongEpisodeSeeds(SyncVectorEnv):
    """``infos["episode_seed"]`` one more than the seed the episode started from."""

    def step(self, actions, env_ids=None):
        *rest, infos = super().step(actions, env_ids)
        return (*rest, _shifted_seeds(infos))

    def reset(self, **kwargs):
        obs, infos = super().reset(**kwargs)
        return obs, _shifted_seeds(infos)


def _shifted_seeds(infos):
    if "episode_seed" in infos:
        infos["episode_seed"] = np.asarray(infos["episode_seed"]) + 1
    return infos


class SortsEnvIds(SyncVectorEnv):
    """``step``/``send`` with ``env_ids`` step those envs but return their rows in increasing id order."""

    def step(self, actions, env_ids=None):
        return super().step(*_sorted(actions, env_ids))

    def send(self, actions, env_ids=None):
        return super().send(*_sorted(actions, env_ids))


def _sorted(actions, env_ids):
    if env_ids is None:
        return actions, env_ids
    order = np.argsort(env_ids)
    return np.asarray(actions)[order], np.asarray(env_ids)[order]


class SortsResetIds(SyncVectorEnv):
    """``reset(env_ids=...)`` returns the rows in increasing id order, each env with its own seed."""

    def reset(self, *, seed=None, options=None, env_ids=None):
        if env_ids is not None:
            order = np.argsort(env_ids)
            env_ids = np.asarray(env_ids)[order]
            if isinstance(seed, list):
                seed = [seed[i] for i in order]
        return super().reset(seed=seed, options=options, env_ids=env_ids)


class ReversesSetAttr(SyncVectorEnv):
    """``set_attr`` with one value per env gives env ``i`` the value of env ``n - 1 - i``."""

    def set_attr(self, name, values, env_ids=None):
        return super().set_attr(name, list(values)[::-1] if isinstance(values, list) else values, env_ids)


class GetAttrIgnoresEnvIds(SyncVectorEnv):
    """``get_attr`` answers for every env whatever ``env_ids`` says."""

    def get_attr(self, name, env_ids=None):
        return super().get_attr(name)


class KeepsAnyTimeout(SyncVectorEnv):
    """The ``timeout`` setter keeps whatever it is given (0, -1, NaN, a str)."""

    @property
    def timeout(self):
        return self._stepper.timeout

    @timeout.setter
    def timeout(self, value):
        self._stepper.timeout = None if value == float("inf") else value


class CloseKeepsItOpen(SyncVectorEnv):
    """``close()`` does nothing: the env goes on answering."""

    def close(self, **kwargs):
        pass


class SecondCloseRaises(SyncVectorEnv):
    """A second ``close()`` raises instead of returning quietly."""

    def close(self, **kwargs):
        calls = self.__dict__.setdefault("close_calls", [])
        calls.append(1)  # atomic: two threads at once both count
        if len(calls) > 1:
            raise RuntimeError("closed twice")
        super().close(**kwargs)


class RawErrorAfterClose(SyncVectorEnv):
    """A call after ``close()`` raises a RuntimeError, as if it ran on what the close freed, not
    `ClosedEnvironmentError`."""

    def step(self, actions, env_ids=None):
        return _raw(lambda: SyncVectorEnv.step(self, actions, env_ids))

    def get_attr(self, name, env_ids=None):
        return _raw(lambda: SyncVectorEnv.get_attr(self, name, env_ids))


def _raw(call):
    try:
        return call()
    except ClosedEnvironmentError:
        raise RuntimeError("the buffers were freed under the call") from None


class RestoresNothing(SyncVectorEnv):
    """``restore_state`` returns the states' observations but leaves the envs as they are."""

    def restore_state(self, states, env_ids=None):
        return np.stack([state.observation for state in states]), {}


class RestoresOneByOne(SyncVectorEnv):
    """``restore_state`` restores each state as it comes, so that a damaged one is found after others changed
    their envs."""

    def restore_state(self, states, env_ids=None):
        ids = list(range(self.num_envs)) if env_ids is None else list(env_ids)
        for state, env in zip(states, ids, strict=True):
            super().restore_state([state], env_ids=[env])
        return super().restore_state(list(states), env_ids=env_ids)


class RestoredEnvsChangeSeeds(SyncVectorEnv):
    """After a ``restore_state``, the episodes drawn report other seeds than their envs' own."""

    def restore_state(self, states, env_ids=None):
        self.__dict__["restored"] = True
        return super().restore_state(states, env_ids)

    def step(self, actions, env_ids=None):
        *rest, infos = super().step(actions, env_ids)
        if self.__dict__.get("restored") and "episode_seed" in infos:
            infos["episode_seed"] = np.asarray(infos["episode_seed"]) ^ 1
        return (*rest, infos)


class HidesEnvErrors(SyncVectorEnv):
    """An env's error comes back as a RuntimeError that says nothing of it."""

    def send(self, actions, env_ids=None):
        return _hidden(lambda: SyncVectorEnv.send(self, actions, env_ids))

    def recv(self, *args, **kwargs):
        return _hidden(lambda: SyncVectorEnv.recv(self, *args, **kwargs))

    def step(self, actions, env_ids=None):
        return _hidden(lambda: SyncVectorEnv.step(self, actions, env_ids))


def _hidden(call):
    try:
        return call()
    except Exception as error:
        if "broke on purpose" in str(error):  # the check env's own error
            raise RuntimeError("an env failed") from None
        raise


class ResetsInsteadOfRestoring(SyncVectorEnv):
    """``restore_state`` resets the envs instead of putting them in the states."""

    def restore_state(self, states, env_ids=None):
        return super().reset(env_ids=env_ids)
