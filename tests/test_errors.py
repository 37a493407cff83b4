"""`torchwm.errors`: the exception types, each also the type Gymnasium or Python raises for the same mistake,
the "did you mean" rule, and a worker's error that is also the env's own exception type and pickles."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest

from torchwm import errors
from torchwm.errors import UnknownNameError, WorkerError


@pytest.mark.parametrize(
    ("error", "peers"),
    [
        (errors.ClosedEnvironmentError, (gym.error.ClosedEnvironmentError,)),
        (errors.NoAsyncCallError, (gym.error.NoAsyncCallError, RuntimeError)),
        (errors.AlreadyPendingCallError, (gym.error.AlreadyPendingCallError, RuntimeError)),
        (errors.InvalidSeedError, (gym.error.Error, ValueError)),
        (errors.InvalidOptionError, (gym.error.Error, ValueError)),
        (errors.EnvTimeoutError, (TimeoutError,)),
        (errors.UnknownNameError, (LookupError,)),
        (errors.DuplicateNameError, (ValueError,)),
        (errors.ConfigError, (ValueError,)),
    ],
)
def test_each_error_is_torchwms_and_the_type_gymnasium_or_python_raises(error, peers):
    assert issubclass(error, errors.TorchwmError) and issubclass(error, peers)


def test_did_you_mean_suggests_the_closest_name_or_nothing():
    assert errors.closest_names("snyc", ["sync", "shmem", "subproc"]) == ["sync"]
    assert errors.did_you_mean("frame_stak", ["frame_stack", "resize"]) == " (did you mean 'frame_stack'?)"
    assert errors.did_you_mean("zzz", ["frame_stack", "resize"]) == ""


def test_an_unknown_name_lists_the_registered_ones_and_a_peer_name_gets_torchwms():
    error = UnknownNameError("wrapper", "frame_stak", ["resize", "frame_stack"])
    assert str(error) == (
        "unknown wrapper 'frame_stak'. Did you mean 'frame_stack'? Registered wrappers: frame_stack, resize. "
        "If 'frame_stak' comes from a plugin, install it (`torchwm list` shows what is loaded)."
    )
    assert error.suggestions == ["frame_stack"] and (error.kind, error.name) == ("wrapper", "frame_stak")
    many = UnknownNameError("source", "x", [f"s{i}" for i in range(31)], hint="Try the gym source.")
    assert str(many).endswith("31 sources are registered. Try the gym source.")
    assert UnknownNameError("backend", "async", ["shmem", "sync"]).suggestions == ["shmem"]


class PlainError(Exception):
    pass


class BuiltByHand(Exception):
    def __init__(self, code):
        super().__init__(code)
        self.code = code


def test_a_worker_error_is_also_the_envs_exception_type_where_that_is_safe():
    cls = errors.worker_error_class(PlainError)
    assert issubclass(cls, WorkerError) and issubclass(cls, PlainError) and cls.original_type is PlainError
    assert errors.worker_error_class(PlainError) is cls  # one class per type
    # A type with an __init__ of its own, a base exception, or no type: plain WorkerError.
    assert errors.worker_error_class(BuiltByHand) is WorkerError
    assert errors.worker_error_class(KeyboardInterrupt) is WorkerError
    assert errors.worker_error_class(None) is WorkerError


def test_a_worker_error_keeps_its_message_and_pickles_as_its_class():
    error = errors.worker_error_class(KeyError)("env 3 raised KeyError", env_index=3, remote_traceback="tb")
    assert str(error) == "env 3 raised KeyError\n\nTraceback in the worker:\ntb"  # not quoted as KeyError's
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and isinstance(again, KeyError)
    assert (again.env_index, str(again)) == (3, str(error))


def test_mark_dropped_records_the_envs_sorted_and_never_raises():
    error = ValueError("boom")
    errors.mark_dropped(error, [3, 1])
    assert error.dropped_env_ids == (1, 3)
    errors.mark_dropped(object(), [0])  # refuses attributes: nothing recorded, no error
