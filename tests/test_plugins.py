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


def test_unknown_name_suggests_close_matches_and_lists_names():
    with pytest.raises(UnknownNameError) as info:
        plugins.registry("backend").get("snyc")
    assert isinstance(info.value, LookupError)
    assert "'sync'" in str(info.value) and info.value.suggestions == ["sync"]
    assert "plugin" in str(info.value)


def test_gymnasiums_async_backend_name_points_to_shmem_not_sync():
    # vectorization_mode="async" is AsyncVectorEnv, which shmem is (docs/from-gymnasium.md); "sync" is only
    # the closest spelling.
    with pytest.raises(UnknownNameError) as info:
        torchwm.make_vec("CartPole-v1", num_envs=2, backend="async")
    message = str(info.value)
    assert "Gymnasium's AsyncVectorEnv; torchwm's backend for it is 'shmem' (or 'subproc'" in message
    assert "Did you mean" not in message and info.value.suggestions == ["shmem", "subproc"]
    assert isinstance(info.value, LookupError)


def test_async_backend_name_on_the_command_line_points_to_shmem(capsys):
    from torchwm.cli import main

    assert main(["run", "CartPole-v1", "--backend", "async", "--steps", "1", "--no-progress"]) == 2
    (error,) = capsys.readouterr().err.strip().splitlines()
    assert error.startswith("torchwm run: error: backend: unknown backend 'async'.")
    assert "torchwm's backend for it is 'shmem'" in error and "'sync'?" not in error


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
    # one line each, in the parent only (the shmem workers load no plugin)
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
    assert not plugins.plugin_manager().has_plugin("typo")
    assert "sync" in {b.name for b in torchwm.list_backends()}


def test_a_builtin_plugin_with_a_misspelt_hook_fails_loudly_at_load(fresh_plugins, tmp_path):
    import_fake_plugin(fresh_plugins, tmp_path, "torchwm_builtin_typo", MISSPELT_HOOK_MODULE)
    fresh_plugins.setattr(plugins, "DEFAULT_PLUGINS", (*plugins.DEFAULT_PLUGINS, "torchwm_builtin_typo"))
    with pytest.raises(pluggy.PluginValidationError, match="unknown hook 'register_backend'"):
        plugins.plugin_manager()


# -- plugins that exit, hang or are slow; plugins load once (issue 37, item 7) ---------------------------

EXITING_PLUGINS = {
    "exits-at-import": "import sys\nsys.exit()\n",
    "exits-3-at-import": "import sys\nsys.exit(3)\n",
    "base-exception-at-import": "class Stop(BaseException):\n    pass\n\nraise Stop('not an Exception')\n",
    "exits-in-hook": (
        "import sys, torchwm\n\n@torchwm.hookimpl\ndef register_backends(register):\n    sys.exit('bye')\n"
    ),
}


def test_a_plugin_that_exits_or_raises_a_base_exception_is_left_out(tmp_path):
    install_fake_distribution(tmp_path, "torchwm-exits", EXITING_PLUGINS)
    out = run_python(
        """
        import numpy as np, torchwm, torchwm.cli
        with torchwm.make_vec("CartPole-v1", 2, backend="sync", seed=0) as envs:
            envs.reset()
            print(envs.step(np.zeros(2, dtype=np.int64))[1].tolist())
        print(sorted(f.name for f in torchwm.plugins.failed_plugins()))
        print("list exits with", torchwm.cli.main(["list", "plugins"]))
    """,
        tmp_path,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["[1.0, 1.0]", str(sorted(EXITING_PLUGINS))]
    assert lines[-1] == "list exits with 0"
    assert sum("NOT LOADED" in line for line in lines) == len(EXITING_PLUGINS)
    assert "failed: SystemExit: 3" in out.stderr and "Stop: not an Exception" in out.stderr
    assert "'exits-in-hook' (from torchwm-exits 0.1) is not loaded: SystemExit: bye" in out.stderr


@pytest.fixture
def fake_entry_points(fresh_plugins, tmp_path):
    """``install(entry_points)``: a distribution of those {name: module text}, found by the next load."""

    def install(entry_points):
        install_fake_distribution(tmp_path, "torchwm-fake", entry_points)
        fresh_plugins.syspath_prepend(str(tmp_path))
        for i in range(len(entry_points)):
            fresh_plugins.delitem(sys.modules, f"torchwm_fake_{i}", raising=False)

    return install


def test_keyboard_interrupt_in_a_plugin_import_propagates(fake_entry_points):
    """Ctrl-C while plugins load stops the program, as it would anywhere else."""
    fake_entry_points({"interrupted": "raise KeyboardInterrupt\n"})
    with pytest.raises(KeyboardInterrupt):
        plugins.registry("backend")
    assert plugins._manager is None  # nothing half-loaded is kept: the next use loads again


def test_a_plugin_import_past_the_deadline_is_left_out_and_named(fake_entry_points, tmp_path, capsys):
    release = tmp_path / "release"
    fake_entry_points(
        {
            "hangs": f"import os, time\nwhile not os.path.exists({str(release)!r}):\n    time.sleep(0.02)\n",
            "fine": THIRD_PARTY_PLUGIN,
        }
    )
    os_environ = __import__("os").environ
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(os_environ, plugins.IMPORT_TIMEOUT_ENV, "0.5")
            failed = {f.name: f for f in plugins.failed_plugins()}
    finally:
        release.touch()  # the import thread ends
    assert list(failed) == ["hangs"]
    assert failed["hangs"].error == (
        "importing 'torchwm_fake_0' did not finish within 0.5 s (set TORCHWM_PLUGIN_IMPORT_TIMEOUT to wait "
        "longer)"
    )
    assert "counting" in plugins.registry("backend")  # the other plugin is loaded
    assert "torchwm: plugin 'hangs' (from torchwm-fake 0.1) is not loaded" in capsys.readouterr().err


def test_a_slow_plugin_import_is_named_in_a_warning(fake_entry_points):
    fake_entry_points({"slow": "import time\ntime.sleep(0.3)\n" + THIRD_PARTY_PLUGIN})
    plugins_module = plugins
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(plugins_module, "SLOW_IMPORT_SECONDS", 0.1)
        with pytest.warns(
            RuntimeWarning, match=r"importing plugin 'slow' \(from torchwm-fake 0.1\) took 0\.\d s"
        ):
            backends = plugins.registry("backend")
    assert backends.get("counting").plugin == "slow"  # slow, not broken: it is loaded


@pytest.mark.parametrize("raw", ["abc", "0", "-1", "nan"])
def test_a_bad_import_timeout_is_refused_naming_the_variable(fresh_plugins, raw):
    fresh_plugins.setenv(plugins.IMPORT_TIMEOUT_ENV, raw)
    with pytest.raises(ValueError, match=f"TORCHWM_PLUGIN_IMPORT_TIMEOUT must be a positive number.*{raw!r}"):
        plugins.import_timeout()


def test_the_import_timeout_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv(plugins.IMPORT_TIMEOUT_ENV, raising=False)
    assert plugins.import_timeout() == plugins.DEFAULT_IMPORT_TIMEOUT
    monkeypatch.setenv(plugins.IMPORT_TIMEOUT_ENV, "2.5")
    assert plugins.import_timeout() == 2.5
    monkeypatch.setenv(plugins.IMPORT_TIMEOUT_ENV, "inf")
    assert plugins.import_timeout() is None


# Writes the pid of each process that imports it.
PID_PLUGIN = (
    "import os\nwith open(os.environ['PLUGIN_IMPORTED_BY'], 'a') as f:\n    f.write(f'{os.getpid()}\\n')\n"
    + THIRD_PARTY_PLUGIN
)


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_workers_build_their_envs_without_loading_plugins(tmp_path, context):
    """A plugin's import is paid once, by the process that calls make_vec: its workers build their envs from
    the entries the spec uses, carried in their payload, and load no plugin."""
    install_fake_distribution(tmp_path, "torchwm-pid", {"pid": PID_PLUGIN})
    imported_by = tmp_path / "imported_by"
    out = run_python(
        f"""
        import os, numpy as np, torchwm

        def rewards(wrappers):
            options = {{"num_workers": 2, "context": {context!r}}}
            with torchwm.make_vec("CartPole-v1", 2, backend="shmem", seed=0, wrappers=wrappers,
                                  backend_kwargs=options) as envs:
                envs.reset()
                return envs.step(np.zeros(2, dtype=np.int64))[1].tolist()

        if __name__ == "__main__":
            print(os.getpid(), rewards([]), open({str(imported_by)!r}).read().split())
            # the plugin's own wrapper, a function its hook defines: carried by value, it needs no import
            print(rewards(["negate_reward"]), len(open({str(imported_by)!r}).read().split()))
    """,
        tmp_path,
        PLUGIN_IMPORTED_BY=str(imported_by),
    )
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()[-2:]
    pid, *rest = first.split(maxsplit=1)
    assert rest == [f"[1.0, 1.0] ['{pid}']"]  # imported by the parent only
    assert second == "[-1.0, -1.0] 1"
