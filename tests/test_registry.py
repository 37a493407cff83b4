"""The registry and plugin loading: duplicates, overrides, disabling, listing, third-party entry points."""

import importlib
import subprocess
import sys
import textwrap

import numpy as np
import pluggy
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
    script = textwrap.dedent("""
        import numpy as np, torchwm, torchwm_counting
        info = {b.name: b for b in torchwm.list_backends()}["counting"]
        print(info.plugin, info.distribution, info.version)
        envs = torchwm.make_vec("CartPole-v1", 2, backend="counting", seed=0, wrappers=["negate_reward"])
        envs.reset()
        _, rewards, *_ = envs.step(np.zeros(2, dtype=np.int64))
        print(torchwm_counting.BUILT, rewards.tolist())
    """)
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)},
        timeout=60,
    )
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


BROKEN_PLUGINS = {
    # entry-point name -> module text
    "raises-at-import": 'raise RuntimeError("this plugin is broken on purpose")\n',
    "takes-sync": (
        "import torchwm\nfrom torchwm.vector.sync import SyncVectorEnv\n\n"
        "@torchwm.hookimpl\ndef register_backends(register):\n    register('sync', SyncVectorEnv)\n"
    ),
    "misspelt-hook": (
        "import torchwm\n\n@torchwm.hookimpl\ndef register_backend(register):\n    register('never', None)\n"
    ),
    "bad-hook-arguments": (
        "import torchwm\n\n@torchwm.hookimpl\ndef register_wrappers(register, extra):\n    pass\n"
    ),
    "torchwm.vector.sync": "import torchwm\n",  # a plugin name torchwm's own sync backend has
}


def install_fake_distribution(root, dist_name, entry_points):
    """A distribution on ``root`` (a sys.path entry) with ``entry_points`` {name: module text} in group
    torchwm."""
    lines = ["[torchwm]"]
    for i, (name, text) in enumerate(entry_points.items()):
        module = f"{dist_name.replace('-', '_')}_{i}"
        (root / f"{module}.py").write_text(text)
        lines.append(f"{name} = {module}")
    dist = root / f"{dist_name.replace('-', '_')}-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")


def run_python(script, path, **env):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(path), **env},
        timeout=300,
    )


def test_broken_plugins_are_reported_once_and_everything_else_works(tmp_path):
    install_fake_distribution(tmp_path, "torchwm-broken", BROKEN_PLUGINS)
    out = run_python(
        """
        import numpy as np, torchwm
        for backend, options in (("sync", {}), ("shmem", {"num_workers": 2, "context": "spawn"})):
            with torchwm.make_vec("CartPole-v1", 2, backend=backend, seed=0, backend_kwargs=options) as envs:
                envs.reset()
                print(backend, envs.step(np.zeros(2, dtype=np.int64))[1].tolist())
        print(sorted(f.name for f in torchwm.plugins.failed_plugins()))
        print({b.name: b.plugin for b in torchwm.list_backends()}["sync"])
    """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "sync [1.0, 1.0]",
        "shmem [1.0, 1.0]",
        str(sorted(BROKEN_PLUGINS)),
        "torchwm.vector.sync",
    ]
    lines = out.stderr.strip().splitlines()
    # one line each, in the parent only (the shmem workers load the plugins again and stay quiet)
    assert len(lines) == len(BROKEN_PLUGINS), out.stderr
    for name in BROKEN_PLUGINS:
        line = next(
            line for line in lines if line.startswith(f"torchwm: plugin {name!r} (from torchwm-broken 0.1)")
        )
        assert f"TORCHWM_DISABLE_PLUGINS={name}" in line or name == "torchwm.vector.sync"
    assert "the plugin name 'torchwm.vector.sync' is taken by torchwm" in out.stderr
    assert "this plugin is broken on purpose" in out.stderr  # what failed
    assert "'sync' is registered twice" in out.stderr
    assert "unknown hook 'register_backend'" in out.stderr


def test_torchwm_list_shows_a_broken_plugin_and_its_error(tmp_path):
    install_fake_distribution(
        tmp_path, "torchwm-broken", {"raises-at-import": BROKEN_PLUGINS["raises-at-import"]}
    )
    out = run_python("import sys, torchwm.cli; sys.exit(torchwm.cli.main(['list']))", tmp_path)
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "raises-at-import" in line)
    assert "torchwm-broken 0.1" in row and "NOT LOADED" in row and "this plugin is broken on purpose" in row
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_disabling_a_broken_plugin_silences_it(tmp_path):
    install_fake_distribution(
        tmp_path, "torchwm-broken", {"raises-at-import": BROKEN_PLUGINS["raises-at-import"]}
    )
    out = run_python(
        "import torchwm; torchwm.make_vec('CartPole-v1', backend='sync').close()",
        tmp_path,
        TORCHWM_DISABLE_PLUGINS="raises-at-import",
    )
    assert out.returncode == 0 and out.stderr == "", out.stderr


def test_a_plugin_that_registers_itself_on_import_is_registered_once(tmp_path):
    """The notebook style (``register_plugin(sys.modules[__name__], ...)`` at import), installed as a
    package."""
    install_fake_distribution(
        tmp_path,
        "torchwm-selfreg",
        {
            "counting": THIRD_PARTY_PLUGIN
            + (
                "\nimport sys\nimport torchwm.plugins\n"
                "torchwm.plugins.register_plugin(sys.modules[__name__], name='counting')\n"
            )
        },
    )
    out = run_python(
        """
        import torchwm
        info = {b.name: b for b in torchwm.list_backends()}["counting"]
        print(info.plugin, info.distribution, torchwm.plugins.failed_plugins())
        torchwm.make_vec("CartPole-v1", 2, backend="counting").close()
    """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["counting", "torchwm-selfreg", "[]"] and out.stderr == ""


def test_a_broken_runtime_plugin_still_raises(fresh_plugins):
    """register_plugin at run time: the caller is there to fix it, so its failure is an error, not a line."""

    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            raise RuntimeError("mine")

    plugins.register_plugin(Plugin(), name="mine")
    with pytest.raises(RuntimeError, match="mine"):
        plugins.registry("backend")


MISSPELT_HOOK_MODULE = (
    "import torchwm\n\n@torchwm.hookimpl\ndef register_backend(register):\n    register('never', None)\n"
)


def import_fake_plugin(monkeypatch, tmp_path, name, text):
    """A plugin module ``name`` written to ``tmp_path`` and imported from there."""
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_a_runtime_plugin_with_a_misspelt_hook_fails_loudly_at_load(fresh_plugins, tmp_path):
    module = import_fake_plugin(fresh_plugins, tmp_path, "torchwm_typo", MISSPELT_HOOK_MODULE)
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook 'register_backend'"):
        plugins.register_plugin(module, name="typo")
    # Refused whole: not left registered, and the registries work without it.
    assert "typo" not in plugins.plugin_names()
    assert "sync" in {b.name for b in torchwm.list_backends()}


def test_a_builtin_plugin_with_a_misspelt_hook_fails_loudly_at_load(fresh_plugins, tmp_path):
    import_fake_plugin(fresh_plugins, tmp_path, "torchwm_builtin_typo", MISSPELT_HOOK_MODULE)
    fresh_plugins.setattr(plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, "torchwm_builtin_typo"))
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook 'register_backend'"):
        plugins.plugin_manager()
