"""`torchwm record` (`torchwm.cli.record`): exactly N episodes written to a Minari dataset that replays from
its seeds; an id taken without ``--overwrite``, a Ctrl-C while writing and bad values leave no dataset."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest

pytest.importorskip("minari")

from support.datasets import replay  # noqa: E402

from torchwm.cli import main  # noqa: E402

# Minari warns for each piece of metadata a dataset lacks (author, description, ...).
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def datasets_path(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    return tmp_path / "datasets"


def test_record_writes_exactly_n_episodes(datasets_path, capsys):
    status = main(
        [
            "record",
            "CartPole-v1",
            "--episodes",
            "5",
            "--dataset-id",
            "test/cli-v0",
            "--num-envs",
            "3",
            "--no-progress",
        ]
    )
    assert status == 0
    import minari

    dataset = minari.load_dataset("test/cli-v0")
    assert dataset.total_episodes == 5
    replay(dataset, lambda _: gym.make("CartPole-v1"))
    summary = capsys.readouterr()
    assert "5 episodes" in summary.out and "test/cli-v0" in summary.out
    # again: the id is taken
    status = main(
        ["record", "CartPole-v1", "--episodes", "2", "--dataset-id", "test/cli-v0", "--no-progress"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "--overwrite" in err[0]
    status = main(
        [
            "record",
            "CartPole-v1",
            "--episodes",
            "2",
            "--dataset-id",
            "test/cli-v0",
            "--overwrite",
            "--no-progress",
        ]
    )
    assert status == 0 and minari.load_dataset("test/cli-v0").total_episodes == 2


def test_record_interrupted_while_writing_leaves_no_dataset(datasets_path, monkeypatch, capsys):
    import minari
    from minari.dataset._storages.hdf5_storage import HDF5Storage  # the default format

    def interrupted(self, episodes):
        raise KeyboardInterrupt

    argv = ["record", "CartPole-v1", "--episodes", "2", "--dataset-id", "test/cut-v0", "--no-progress"]
    with monkeypatch.context() as patch:
        patch.setattr(HDF5Storage, "update_episodes", interrupted)
        status = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 130 and "no dataset written" in err[-1]
    assert "test/cut-v0" not in minari.list_local_datasets()
    assert not (datasets_path / "test" / "cut-v0").exists()
    assert main(argv) == 0 and minari.load_dataset("test/cut-v0").total_episodes == 2  # the id is free


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["--episodes", "0"], "expected an integer >= 1"),
        (["--policy", "no_such_module_xyz:act"], "cannot import"),
        (["--policy", "nocolon"], "module:function"),
        (["--dataset-id", "bad id"], "dataset ID"),
    ],
)
def test_record_bad_values_are_one_line_exit_2(arguments, words, capsys):
    argv = [
        "record",
        "CartPole-v1",
        "--episodes",
        "2",
        "--dataset-id",
        "test/bad-v0",
        "--no-progress",
        *arguments,
    ]
    with warnings.catch_warnings():
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and words in err[0], err
