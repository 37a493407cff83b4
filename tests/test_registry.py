"""The registry and plugin loading: duplicates, overrides, disabling, listing, third-party entry points."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import torchwm
from torchwm import plugins
from torchwm.errors import DuplicateNameError, UnknownNameError
from torchwm.registry import Registry


def test_duplicate_name_is_an_error_naming_both_plugins():
    reg = Registry("backend")
    reg.register("fast", lambda spec: None, plugin="first")
    with pytest.raises(DuplicateNameError, match="'fast'.*'first'.*'second'"):
        reg.register("fast", lambda spec: None, plugin="second")


def test_override_replaces_and_keeps_the_new_plugin():
    reg = Registry("backend")
    reg.register("fast", lambda spec: 1, plugin="first")
    reg.register("fast", lambda spec: 2, plugin="second", override=True)
    assert reg.get("fast").plugin == "second"
    assert reg.get("fast").factory(None) == 2


def test_unknown_name_suggests_close_matches_and_lists_names():
    with pytest.raises(UnknownNameError) as info:
        plugins.registry("backend").get("snyc")
    assert isinstance(info.value, LookupError)
    assert "'sync'" in str(info.value) and info.value.suggestions == ["sync"]
    assert "plugin" in str(info.value)


def test_list_functions_name_plugin_distribution_and_version():
    backends = {b.name: b for b in torchwm.list_backends()}
    assert backends["sync"].plugin == "torchwm.vector.sync"
    assert backends["sync"].distribution == "torchwm"
    assert backends["sync"].version == torchwm.spec.package_versions()["torchwm"]
    wrappers = {w.name: w for w in torchwm.list_wrappers()}
    assert wrappers["frame_stack"].options == {"stack_size": 4, "padding": "zero"}
    assert {s.name for s in torchwm.list_sources()} >= {"gym", "ale"}


def test_disable_plugins_blocks_a_builtin(fresh_plugins):
    fresh_plugins.setenv("TORCHWM_DISABLE_PLUGINS", "torchwm.vector.sync, nothing.else")
    assert "sync" not in plugins.registry("backend")
    with pytest.raises(UnknownNameError, match="unknown backend 'sync'"):
        torchwm.make_vec("CartPole-v1", backend="sync")


def test_loading_runs_once(fresh_plugins):
    assert plugins.plugin_manager() is plugins.plugin_manager()
    assert plugins.registry("backend") is plugins.registry("backend")


def test_runtime_plugin_registers_and_can_override(fresh_plugins):
    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register("sync", torchwm.vector.sync.SyncVectorEnv, override=True, description="mine")

    plugins.register_plugin(Plugin(), name="mine")
    assert plugins.registry("backend").get("sync").plugin == "mine"
    plugins.unregister_plugin("mine")
    assert plugins.registry("backend").get("sync").plugin == "torchwm.vector.sync"


def test_runtime_duplicate_without_override_fails(fresh_plugins):
    class Plugin:
        @torchwm.hookimpl
        def register_wrappers(self, register):
            register("frame_stack", lambda env: env)

    plugins.register_plugin(Plugin(), name="clash")
    with pytest.raises(DuplicateNameError, match="frame_stack"):
        plugins.registry("wrapper")


THIRD_PARTY_PLUGIN = '''
"""A throwaway third-party backend: sync, but it counts the vector envs it built."""
import torchwm
from torchwm.vector.sync import SyncVectorEnv

BUILT = []

def make_counting(spec, **backend_kwargs):
    BUILT.append(spec.id)
    return SyncVectorEnv(spec, **backend_kwargs)

@torchwm.hookimpl
def register_backends(register):
    register("counting", make_counting, description="sync that counts")

@torchwm.hookimpl
def register_wrappers(register):
    def negate_reward(env, factor: float = -1.0):
        import gymnasium as gym
        return gym.wrappers.TransformReward(env, lambda r: r * factor)
    register("negate_reward", negate_reward)
'''


def test_third_party_plugin_from_an_entry_point(tmp_path):
    """A package on sys.path with a .dist-info entry point is used with no change to torchwm."""
    (tmp_path / "torchwm_counting.py").write_text(THIRD_PARTY_PLUGIN)
    dist = tmp_path / "torchwm_counting-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torchwm-counting\nVersion: 0.3\n")
    (dist / "entry_points.txt").write_text("[torchwm]\ncounting = torchwm_counting\n")
    script = textwrap.dedent('''
        import numpy as np, torchwm, torchwm_counting
        info = {b.name: b for b in torchwm.list_backends()}["counting"]
        print(info.plugin, info.distribution, info.version)
        envs = torchwm.make_vec("CartPole-v1", 2, backend="counting", seed=0, wrappers=["negate_reward"])
        envs.reset()
        _, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))
        print(torchwm_counting.BUILT, rewards.tolist())
    ''')
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)}, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "counting torchwm-counting 0.3"
    assert lines[-1] == "['CartPole-v1'] [-1.0, -1.0]"


def test_every_hook_has_a_docstring_with_an_example():
    from torchwm import hookspecs

    for name in plugins.HOOK_KINDS:
        doc = getattr(hookspecs, name).__doc__
        assert doc and "register(" in doc, f"hook {name} needs a docstring with an example"


def test_sync_backend_is_gymnasium_vector_env():
    import gymnasium as gym

    with torchwm.make_vec("CartPole-v1", 2, seed=0) as envs:
        assert isinstance(envs, gym.vector.VectorEnv)
        obs, _ = envs.reset()
        assert obs.shape == (2, 4) and np.isfinite(obs).all()
