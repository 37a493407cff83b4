"""Checks of the calls beside stepping: ``get_attr``, ``set_attr`` and ``call`` (with ``env_ids`` too), and
the ``timeout`` setter's checks of its value."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchwm.testing.target import (
    BackendUnderTest,
)


def check_attributes(target: BackendUnderTest) -> None:
    """get_attr / call read every env; set_attr writes every env."""
    with target.make(2, seed=0) as envs:
        spaces_ = envs.get_attr("action_space")
        assert len(spaces_) == 2 and all(s == envs.single_action_space for s in spaces_), (
            f"get_attr('action_space') gave {spaces_}"
        )
        envs.set_attr("torchwm_probe", [5, 6])
        assert tuple(envs.get_attr("torchwm_probe")) == (5, 6), (
            f"set_attr then get_attr gave {envs.get_attr('torchwm_probe')}"
        )


def check_env_ids_in_calls(target: BackendUnderTest) -> None:
    """call / get_attr / set_attr with ``env_ids`` reach those envs only, in that order; bad ``env_ids`` are a
    ValueError, as in reset and step. A backend whose envs have no Python attributes may refuse set_attr
    (NotImplementedError), as it does without ``env_ids``."""
    with target.make(4, seed=0) as envs:
        spaces_ = envs.get_attr("action_space", env_ids=[2, 0])
        assert len(spaces_) == 2 and all(s == envs.single_action_space for s in spaces_), (
            f"get_attr('action_space', env_ids=[2, 0]) gave {spaces_}"
        )
        for bad in ([4], [-1], [1, 1], []):
            for name, args in (
                ("get_attr", ("action_space",)),
                ("call", ("action_space",)),
                ("set_attr", ("torchwm_probe", 1)),
            ):
                try:
                    getattr(envs, name)(*args, env_ids=bad)
                except ValueError:
                    continue
                except Exception as exc:
                    raise AssertionError(
                        f"{name}(env_ids={bad}) raised {exc!r}, expected a ValueError"
                    ) from exc
                raise AssertionError(f"{name}(env_ids={bad}) was accepted, expected a ValueError")
        try:
            envs.set_attr("torchwm_probe", [0, 0, 0, 0])
        except NotImplementedError:
            try:
                envs.set_attr("torchwm_probe", 1, env_ids=[1])
            except NotImplementedError:
                return
            raise AssertionError("set_attr is refused on every env but accepted with env_ids=[1]") from None
        envs.set_attr("torchwm_probe", [7, 9], env_ids=[3, 1])
        envs.set_attr("torchwm_probe", 5, env_ids=[2])
        got = tuple(envs.get_attr("torchwm_probe"))
        assert got == (0, 9, 5, 7), f"set_attr with env_ids [3, 1] then [2] gave {got}, expected (0, 9, 5, 7)"
        got = tuple(envs.call("torchwm_probe", env_ids=[1, 3, 0]))
        assert got == (9, 7, 0), f"call('torchwm_probe', env_ids=[1, 3, 0]) gave {got}, expected (9, 7, 0)"
        got = tuple(envs.get_attr("torchwm_probe", env_ids=[2]))
        assert got == (5,), f"get_attr('torchwm_probe', env_ids=[2]) gave {got}, expected (5,)"


def check_timeout_setter(target: BackendUnderTest) -> None:
    """Setting ``timeout`` checks the value as the constructor's ``timeout`` option is checked: a number of
    seconds > 0 or None (``math.inf``: None). A bad one (0, -1, NaN: ValueError; a str, a bool: TypeError)
    names ``timeout``, is not kept, and the env goes on."""
    with target.make(2, seed=0) as envs:
        for value, want in ((30, 30.0), (float("inf"), None), (None, None), (12.5, 12.5)):
            envs.timeout = value
            assert envs.timeout == want, (
                f"after timeout = {value!r}, timeout is {envs.timeout!r}, not {want!r}"
            )
        bad: list[tuple[Any, type[Exception]]] = [
            (0, ValueError),
            (-1, ValueError),
            (float("nan"), ValueError),
            ("5", TypeError),
            (True, TypeError),
        ]
        for wrong, error in bad:
            try:
                envs.timeout = wrong
            except error as exc:
                assert "timeout" in str(exc) and repr(wrong) in str(exc), (
                    f"the error for timeout = {wrong!r} should name timeout and the value: {exc}"
                )
            else:
                raise AssertionError(f"timeout = {wrong!r} was accepted; expected {error.__name__}")
            assert envs.timeout == 12.5, f"a refused timeout = {wrong!r} changed timeout to {envs.timeout!r}"
        envs.reset()
        obs = envs.step(np.zeros(2, dtype=np.int64))[0]
        assert envs.observation_space.contains(obs), "the env did not go on after refused timeouts"
