"""What the kit runs on a backend: the checks that apply and the options, from the backend's own
``conformance`` registration, or from the kit for torchwm's own backends, which register none."""

import torchwm
from torchwm import plugins, testing
from torchwm.plugins import registry
from torchwm.testing.target import BUILTIN_CONFORMANCE


def test_torchwms_backends_register_no_conformance_and_the_kit_holds_theirs():
    for name in ("subproc", "shmem", "ale-native"):
        assert "conformance" not in registry("backend").get(name).metadata, name
    for name in ("subproc", "shmem"):
        methods = [variant["context"] for variant in testing.variants(name)]
        assert sorted(set(methods)) == ["fork", "forkserver", "spawn"], methods
        assert any(variant.get("inline") for variant in testing.variants(name))
    left_out = {check.__name__ for check in testing.CHECKS} - {
        c.__name__ for c in testing.checks_for("ale-native")
    }
    assert left_out == set(BUILTIN_CONFORMANCE["ale-native"]["skip"])
    assert "check_matches_sync" in left_out
    assert testing.variants("sync") == [{}] and testing.checks_for("sync") == testing.CHECKS


def test_a_backend_registered_with_conformance_is_checked_as_it_says(fresh_plugins):
    class Plugin:
        @torchwm.hookimpl
        def register_backends(self, register):
            register(
                "probe",
                torchwm.vector.sync.SyncVectorEnv,
                conformance={"skip": {"check_batch_size": "why not"}, "variants": [{"a": 1}, {"a": 2}]},
            )
            # Its own metadata wins over the kit's entry for the name it takes over.
            register("shmem", torchwm.vector.sync.SyncVectorEnv, override=True, conformance={})

    plugins.register_plugin(Plugin(), name="probe")
    assert testing.variants("probe") == [{"a": 1}, {"a": 2}]
    assert [c.__name__ for c in testing.CHECKS if c not in testing.checks_for("probe")] == [
        "check_batch_size"
    ]
    assert testing.BackendUnderTest("probe").skips == {"check_batch_size": "why not"}
    assert testing.variants("shmem") == [{}] and testing.checks_for("shmem") == testing.CHECKS


MULTIAGENT = [check for check in testing.CHECKS if "multiagent" in check.__name__]


def test_without_pettingzoo_the_multiagent_checks_are_skipped_with_the_reason(monkeypatch):
    import importlib.util
    import unittest

    import pytest

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "pettingzoo" else real_find_spec(name, *a),
    )
    assert len(MULTIAGENT) == 4
    with pytest.raises(unittest.SkipTest, match=r'needs PettingZoo, .*\[pettingzoo\]"'):
        MULTIAGENT[0](testing.BackendUnderTest("sync"))
    monkeypatch.setattr(testing, "CHECKS", MULTIAGENT)
    results = testing.run_checks("sync")
    assert [r.name for r in results] == [c.__name__ for c in MULTIAGENT]
    assert all(r.skipped and r.passed and "PettingZoo" in r.message for r in results)


def test_backends_that_build_envs_from_an_id_skip_the_multiagent_checks_saying_why():
    for name in ("ale-native", "envpool"):
        if name not in registry("backend").names():
            continue
        skips = testing.BackendUnderTest(name).skips
        for check in MULTIAGENT:
            assert "from an env id" in skips[check.__name__], (name, check.__name__)
