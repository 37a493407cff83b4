"""make_env and make_vec: pixels, check_env, seeds, and bad input refused before anything starts."""

import cv2
import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import torchwm
from torchwm.errors import UnknownNameError


def test_make_env_size_gives_resized_rendered_frames():
    env = torchwm.make_env("CartPole-v1", backend="gym", size=(64, 48))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (48, 64, 3) and obs.dtype == np.uint8
    plain = gym.make("CartPole-v1", render_mode="rgb_array")
    plain.reset(seed=0)
    # The frame is the env's own render, resized as Gymnasium's ResizeObservation does.
    expected = cv2.resize(plain.render(), (64, 48), interpolation=cv2.INTER_AREA)
    assert np.array_equal(obs, expected.reshape(obs.shape))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5"])
def test_make_env_passes_check_env(env_id):
    check_env(torchwm.make_env(env_id), skip_render_check=True)


def test_make_env_seed_is_the_first_reset_seed():
    a = torchwm.make_env("CartPole-v1", seed=5)
    b = gym.make("CartPole-v1")
    assert np.array_equal(a.reset()[0], b.reset(seed=5)[0])


def test_make_env_source_and_backend_conflict():
    with pytest.raises(ValueError, match="another name for source"):
        torchwm.make_env("CartPole-v1", source="gym", backend="ale")


def test_ale_source_gives_the_gym_sources_arrays():
    a = torchwm.make_vec("pong", 2, source="ale", seed=0)
    b = torchwm.make_vec("pong", 2, source="gym", seed=0)
    rng = np.random.default_rng(0)
    try:
        assert np.array_equal(a.reset()[0], b.reset()[0])
        for _ in range(50):
            actions = rng.integers(0, 6, size=2)
            for x, y in zip(a.step(actions)[:4], b.step(actions)[:4]):
                assert np.array_equal(x, y)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"backend": "nope"}, UnknownNameError, "unknown backend 'nope'"),
        ({"source": "nope"}, UnknownNameError, "unknown source 'nope'"),
        ({"wrappers": ["nope"]}, UnknownNameError, "unknown wrapper 'nope'"),
        ({"num_envs": 0}, ValueError, "num_envs must be an int >= 1, got 0"),
        ({"num_envs": 2.5}, TypeError, "num_envs must be an int >= 1, got 2.5"),
        ({"size": (64,)}, ValueError, r"size must be two positive ints \(width, height\), got \(64,\)"),
        ({"size": (64, -1)}, ValueError, "size must be two positive ints"),
        ({"seed": -1}, ValueError, "seed must be an int >= 0"),
        ({"autoreset_mode": "sometimes"}, ValueError, "autoreset_mode must be one of"),
        (
            {"wrappers": [{"name": "frame_stack", "stack": 4}]},
            TypeError,
            "has no option 'stack' \\(did you mean 'stack_size'\\?\\); its options are: stack_size, padding",
        ),
        (
            {"wrappers": [{"name": "frame_stack", "stack_size": "four"}]},
            TypeError,
            "option 'stack_size' expected int, got 'four'",
        ),
        ({"wrappers": [{"name": "frame_stack", "padding": "mirror"}]}, TypeError, "option 'padding'"),
        (
            {"wrappers": ["atari_preprocessing"]},
            ValueError,
            "works only on atari envs, and 'CartPole-v1' is not one",
        ),
        ({"wrappers": [{"stack_size": 4}]}, ValueError, "needs a 'name' key"),
        ({"wrappers": "frame_stack"}, TypeError, "must be a list of wrappers"),
        ({"wrappers": [3]}, TypeError, "a wrapper must be a name"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(kwargs, error, message):
    with pytest.raises(error, match=message):
        torchwm.make_vec("CartPole-v1", **kwargs)


def test_unknown_env_id():
    with pytest.raises(LookupError, match="Did you mean 'CartPole-v1'"):
        torchwm.make_vec("CartPol-v1")


# Values of every kind for every argument: make_vec must answer with a clear error or an env, nothing else.
anything = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.lists(st.integers(-2, 100), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    env_id=st.one_of(st.sampled_from(["CartPole-v1", "pong", "ALE/Pnog-v5", ""]), anything),
    num_envs=anything,
    backend=st.one_of(st.sampled_from(["sync", "snyc"]), anything),
    wrappers=st.one_of(
        st.none(),
        st.lists(
            st.one_of(
                st.sampled_from(["frame_stack", "clip_reward", "nope"]),
                st.fixed_dictionaries(
                    {"name": st.just("frame_stack")}, optional={"stack_size": anything, "padding": anything}
                ),
                anything,
            ),
            max_size=2,
        ),
    ),
    seed=anything,
    autoreset_mode=st.one_of(st.sampled_from(["next_step", "same_step", "disabled"]), anything),
    size=anything,
    backend_kwargs=st.one_of(st.none(), anything),
)
def test_fuzz_make_vec_only_raises_clear_errors(
    env_id, num_envs, backend, wrappers, seed, autoreset_mode, size, backend_kwargs
):
    num_envs = 1 if num_envs is None else num_envs
    try:
        envs = torchwm.make_vec(
            env_id,
            num_envs,
            backend=backend,
            wrappers=wrappers,
            seed=seed,
            autoreset_mode=autoreset_mode,
            size=size,
            backend_kwargs=backend_kwargs,
        )
    except (ValueError, TypeError, LookupError):
        return
    with envs:
        assert envs.num_envs == num_envs


# -- the trial's small things (issue 27, item 7) -------------------------------------------------------------


def test_an_env_kwarg_of_a_wrapper_names_the_wrapper():
    """``frame_skip=4`` on an ALE id: Gymnasium's exception type (TypeError), with the wrapper that takes
    it."""
    import ale_py

    gym.register_envs(ale_py)
    with pytest.raises(TypeError):
        gym.make("ALE/Breakout-v5", frame_skip=4)
    with pytest.raises(TypeError, match="'frame_skip'.*option of the wrapper 'atari_preprocessing'"):
        torchwm.make_vec("ALE/Breakout-v5", 2, backend="shmem", frame_skip=4)


def test_a_misspelt_wrapper_option_gets_a_did_you_mean():
    with pytest.raises(TypeError, match=r"no option 'stack_sise' \(did you mean 'stack_size'\?\)"):
        torchwm.make_vec("CartPole-v1", wrappers=[{"name": "frame_stack", "stack_sise": 2}])


def run_script(tmp_path, text, timeout=300):
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(text)
    return subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=tmp_path
    )


def test_the_ale_banner_is_printed_at_most_once(tmp_path):
    out = run_script(
        tmp_path,
        (
            "import numpy as np, torchwm\n"
            "if __name__ == '__main__':\n"
            "    for backend, context in (('shmem', 'forkserver'), ('subproc', 'spawn')):\n"
            "        with torchwm.make_vec('ALE/Pong-v5', 4, backend=backend, seed=0,\n"
            "                              backend_kwargs={'num_workers': 2, 'context': context}) as envs:\n"
            "            envs.reset()\n"
            "    with torchwm.make_vec('ALE/Pong-v5', 2, backend='sync', seed=0) as envs:\n"
            "        envs.reset()\n"
        ),
    )
    assert out.returncode == 0, out.stderr
    assert (out.stdout + out.stderr).count("A.L.E: Arcade Learning Environment") <= 1, out.stdout + out.stderr


@pytest.mark.parametrize("backend", ["shmem", "subproc"])
def test_spawn_without_a_main_guard_prints_the_helpful_line_only(backend, tmp_path):
    out = run_script(
        tmp_path,
        (
            "import torchwm\n"
            f"envs = torchwm.make_vec('CartPole-v1', 2, backend={backend!r},\n"
            "                        backend_kwargs={'num_workers': 2, 'context': 'spawn'})\n"
        ),
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert "if __name__ == '__main__':" in lines[-1] and lines[-1].startswith("torchwm.errors.WorkerError")
    # the parent's one error; none of the workers' tracebacks (each used to print its own, twice)
    assert out.stderr.count("Traceback") == 1 and "RuntimeError" not in out.stderr and len(lines) < 25, (
        out.stderr
    )


# -- a backend that returns no vector env (issue 37, item 8) ------------------------------------------


class _Closable:
    """Not a vector env, but something that holds resources."""

    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True

    def __repr__(self):
        return "<Closable>"


class _ClosableEnv(gym.Wrapper):
    """One env, where a vector env was expected."""

    closed = False

    def close(self):
        self.closed = True
        super().close()


@pytest.mark.parametrize(
    ("returned", "described"),
    [
        (lambda: None, "got None"),
        (lambda: _ClosableEnv(gym.make("CartPole-v1")), "got a test_factory._ClosableEnv (<_ClosableEnv"),
        (lambda: _Closable(), "got a test_factory._Closable (<Closable>)"),
        (lambda: [1, 2], "got a builtins.list ([1, 2])"),
    ],
    ids=["None", "gym.Env", "closable", "list"],
)
def test_a_backend_that_returns_no_vector_env_is_a_type_error_naming_it(fresh_plugins, returned, described):
    made = []

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            def broken(spec, **backend_kwargs):
                made.append(returned())
                return made[-1]

            register("broken", broken)

    torchwm.plugins.register_plugin(Plugin(), name="broken-backends")
    with pytest.raises(TypeError) as caught:
        torchwm.make_vec("CartPole-v1", 2, backend="broken")
    message = str(caught.value)
    assert message.startswith(
        "backend 'broken' (registered by plugin 'broken-backends') must return a gymnasium.vector.VectorEnv"
    )
    assert described in message
    # What came is closed (the env, the closable): nothing it holds outlives the error.
    assert getattr(made[0], "closed", True) is True


def test_make_vec_takes_resolve_specs_parameters_and_gymnasiums_two():
    """make_vec's signature is resolve_spec's, with Gymnasium's vectorization_mode and vector_kwargs: a
    parameter added to one of them only fails here."""
    import inspect

    make = inspect.signature(torchwm.make_vec).parameters
    resolve = inspect.signature(torchwm.factory.resolve_spec).parameters
    assert set(make) == set(resolve) | {"vectorization_mode", "vector_kwargs"}

    def declared(parameter):
        return parameter.kind, parameter.default, parameter.annotation

    # Where they differ, and why: make_vec's id may be an EnvSpec, its backend None means "sync" or what
    # vectorization_mode says, and its env kwargs are keyword arguments (resolve_spec takes them as a dict).
    assert {name for name in resolve if declared(make[name]) != declared(resolve[name])} == {
        "id",
        "backend",
        "env_kwargs",
    }
    assert make["env_kwargs"].kind is inspect.Parameter.VAR_KEYWORD


def test_make_vec_passes_every_argument_on_to_resolve_spec(monkeypatch):
    import inspect

    given = {
        "wrappers": ["episode_statistics"],
        "seed": 7,
        "autoreset_mode": "same_step",
        "source": "gym",
        "size": (32, 24),
        "backend_kwargs": {"num_workers": 1},
        "fused": False,
        "autoreset_seeds": True,
    }
    passed = {}

    def resolve_spec(**kwargs):
        passed.update(kwargs)
        raise LookupError("stop before building")

    original = torchwm.factory.resolve_spec
    monkeypatch.setattr(torchwm.factory, "resolve_spec", resolve_spec)
    with pytest.raises(LookupError, match="stop before building"):
        torchwm.make_vec("CartPole-v1", 3, backend="subproc", render_mode="rgb_array", **given)
    assert passed == {
        "id": "CartPole-v1",
        "num_envs": 3,
        "backend": "subproc",
        "env_kwargs": {"render_mode": "rgb_array"},
        **given,
    }
    assert list(passed) == list(inspect.signature(original).parameters)  # every one, each by its name
