"""The step state's rules, without any env or process: each transition, each refusal, and the fairness of
`collect` (torchwm.vector.step_state)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from torchwm.errors import AlreadyPendingCallError, NoAsyncCallError
from torchwm.vector.step_state import StepState


def ids(*envs: int) -> np.ndarray:
    return np.array(envs, dtype=np.int64)


def reset_all(state: StepState) -> StepState:
    state.was_reset(np.arange(state.num_envs))
    return state


def test_an_env_never_reset_may_not_step():
    state = StepState(3, 3)
    state.was_reset(ids(0, 2))
    with pytest.raises(gym.error.ResetNeeded, match=r"envs \[1\] were never reset"):
        state.check_can_send(ids(0, 1, 2))
    state.check_can_send(ids(2, 0))
    state.was_reset(ids(1))
    assert state.all_reset


def test_an_env_in_flight_may_not_be_sent_again_nor_reset_but_the_others_may():
    state = reset_all(StepState(4, 4))
    state.sent(ids(1, 3), ids(1, 3), in_env_order=False)
    with pytest.raises(AlreadyPendingCallError, match=r"envs \[3\] already have an action in flight"):
        state.check_can_send(ids(0, 3))
    with pytest.raises(AlreadyPendingCallError, match=r"envs \[1\] have an action in flight"):
        state.check_can_reset(ids(0, 1))
    state.check_can_send(ids(0, 2))
    state.check_can_reset(ids(0, 2))
    assert state.pending() == "step"


def test_a_recv_with_nothing_in_flight_is_refused_in_gymnasiums_words():
    state = reset_all(StepState(2, 2))
    with pytest.raises(NoAsyncCallError, match="without any prior call to `step_async`"):
        state.recv_started()
    state.sent(ids(1), ids(1), in_env_order=False)
    assert state.recv_started().tolist() == [1]
    assert state.recvs == 1


def test_results_go_from_in_flight_to_ready_to_received():
    state = reset_all(StepState(3, 3))
    state.sent(np.arange(3), None, in_env_order=True)
    state.arrived(ids(2, 0), [{"a": 2}, {"a": 0}])
    assert state.in_flight.tolist() == [True, True, True]  # ready envs are still in flight for the caller
    state.arrived([1], [{}])
    got, infos = state.collect(3)
    assert got.tolist() == [2, 0, 1] and infos == [{"a": 2}, {"a": 0}, {}]
    assert state.ready == {}
    state.received(got)
    assert not state.in_flight.any() and state.pending() is None


def test_rows_are_ranked_in_the_order_they_were_sent_across_sends():
    state = reset_all(StepState(5, 5))
    state.sent(ids(1, 3), ids(3, 1), in_env_order=False)
    state.sent(ids(0, 4), ids(4, 0), in_env_order=False)
    ranks = state.send_rank[[3, 1, 4, 0]]
    assert ranks.tolist() == sorted(ranks.tolist())
    assert not state.in_env_order


def test_collect_serves_the_envs_sent_longest_ago_first():
    # batch_size 2 of 4: env 3, sent two recvs before the others, is served first, whatever came first.
    state = reset_all(StepState(4, 2))
    state.sent(ids(3), ids(3), in_env_order=False)
    state.recv_started()
    state.recv_started()
    state.sent(ids(0, 1, 2), ids(0, 1, 2), in_env_order=False)
    state.arrived(ids(1, 0, 3, 2), [{"env": 1}, {"env": 0}, {"env": 3}, {"env": 2}])
    got, infos = state.collect(2)
    assert got.tolist() == [3, 1]  # then arrival order among envs sent together
    assert infos == [{"env": 3}, {"env": 1}]
    assert sorted(state.ready) == [0, 2]


def test_an_env_passed_over_twice_is_overdue():
    state = reset_all(StepState(4, 1))
    state.sent(np.arange(4), np.arange(4), in_env_order=False)
    candidates = np.arange(4)
    assert state.overdue(candidates, 4) == []  # every env waited for anyway
    for _ in range(8):  # patience: two rounds of num_envs / count recvs
        state.recv_started()
    assert state.overdue(candidates, 1) == [0, 1, 2, 3]


def test_an_abandoned_step_marks_its_envs_for_reset_and_its_workers_abandoned():
    state = reset_all(StepState(4, 4))
    state.sent(ids(0, 1), ids(0, 1), in_env_order=False)
    state.worker_sent(0, ids(0, 1))
    state.arrived(ids(0), [{}])
    assert state.abandon(sending=ids(3)) == [0]
    assert state.must_reset.tolist() == [True, True, False, True]
    assert not state.in_flight.any() and state.ready == {}
    assert state.busy == {0: None}
    assert state.worker_finished(0) is None  # its results are dropped
    assert state.busy == {}
    with pytest.raises(gym.error.ResetNeeded, match=r"envs \[1, 3\] must be reset"):
        state.check_can_send(ids(1, 2, 3))
    state.was_reset(ids(1, 3))
    assert state.must_reset.tolist() == [True, False, False, False] and state.any_must_reset
    state.was_reset(ids(0))
    assert not state.any_must_reset
    state.check_can_send(np.arange(4))


def test_a_worker_finishing_its_step_hands_back_its_envs_once():
    state = reset_all(StepState(4, 4))
    state.worker_sent(1, ids(2, 3))
    assert state.worker_finished(1).tolist() == [2, 3]
    with pytest.raises(KeyError):
        state.worker_finished(1)


def test_a_reset_drops_a_result_waiting_for_the_env():
    state = reset_all(StepState(2, 2))
    state.sent(ids(0, 1), ids(0, 1), in_env_order=False)
    state.arrived(ids(0, 1), [{"old": 0}, {"old": 1}])
    state.received(ids(0))  # e.g. a worker restarted: its env 0's result was kept, not returned
    state.was_reset(ids(0))
    assert list(state.ready) == [1]


def test_fail_leaves_nothing_in_flight_or_ready():
    state = reset_all(StepState(3, 3))
    state.sent(np.arange(3), None, in_env_order=True)
    state.arrived(ids(0), [{}])
    state.fail()
    assert not state.in_flight.any() and state.ready == {} and not state.any_must_reset


def test_an_env_error_fails_its_own_send_and_keeps_the_others():
    state = reset_all(StepState(4, 4))
    state.sent(ids(2), ids(2), in_env_order=False)  # a send of env 2 (worker 1)
    state.worker_sent(1, ids(2))
    state.sent(ids(0, 1), ids(0, 1), in_env_order=False)  # a later send of envs 0 and 1 (worker 0)
    state.worker_sent(0, ids(0, 1))
    state.arrived(state.worker_finished(1), [{"t": 1}])
    error = RuntimeError("env 0 broke")
    state.step_failed(state.worker_finished(0), error)
    raised, abandoned = state.take_error()
    assert raised is error and abandoned == []
    assert raised.dropped_env_ids == (0, 1)  # the envs whose results the error dropped
    # Envs 0 and 1 (the failed send) are no longer in flight; env 2's result is still there.
    assert state.in_flight.tolist() == [False, False, True, False] and list(state.ready) == [2]
    assert state.errors == []


def test_an_env_error_abandons_the_steps_of_its_send_still_running():
    state = reset_all(StepState(4, 4))
    state.sent(np.arange(4), None, in_env_order=True)  # one send of every env, on two workers
    state.worker_sent(0, ids(0, 1))
    state.worker_sent(1, ids(2, 3))
    state.step_failed(state.worker_finished(0), RuntimeError("env 0 broke"))
    _, abandoned = state.take_error()
    assert abandoned == [1] and state.busy == {1: None} and not state.in_flight.any()


def test_a_send_of_every_env_ranks_its_envs_in_env_order_when_a_part_comes_back():
    state = reset_all(StepState(4, 4))
    state.sent(ids(3, 2, 1, 0), ids(3, 2, 1, 0), in_env_order=False)
    state.received(np.arange(4))
    state.sent(np.arange(4), None, in_env_order=True)  # no env_ids: no ranks written on the hot path
    assert np.argsort(state.rank(ids(3, 2)), kind="stable").tolist() == [1, 0]  # rows [2, 3]


def _step_state_writes(path) -> list[str]:
    """Places in ``path`` that change a `StepState` field (``state.busy[w] = ...``, ``state.ready.pop(...)``,
    an alias of a field changed later in the same function) instead of calling a transition."""
    import ast
    from pathlib import Path

    import torchwm.vector.step_state as module

    init = next(
        node
        for node in ast.walk(ast.parse(Path(module.__file__).read_text()))
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    )
    fields = {
        target.attr
        for node in ast.walk(init)
        for target in getattr(node, "targets", [getattr(node, "target", None)])
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    }
    mutators = {"pop", "popitem", "update", "clear", "setdefault", "fill", "put", "sort", "append", "extend"}

    def field_of(node):  # "busy" for `<...>.state.busy` / `<...>._state.busy`, else None
        if isinstance(node, ast.Attribute) and node.attr in fields:
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", None)
            if name in ("state", "_state"):
                return node.attr
        return None

    found = []
    tree = ast.parse(Path(path).read_text())
    for function in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] or [
        tree
    ]:
        aliases = {}
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                if field_of(node.value):
                    aliases[node.targets[0].id] = field_of(node.value)

        def changed(node, aliases=aliases):
            base = node.value if isinstance(node, ast.Subscript) else node
            if field_of(base) or field_of(node):
                return field_of(base) or field_of(node)
            return (
                aliases.get(base.id)
                if isinstance(base, ast.Name) and isinstance(node, ast.Subscript)
                else None
            )

        for node in ast.walk(function):
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                for target in targets:
                    if isinstance(target, (ast.Attribute, ast.Subscript)) and changed(target):
                        found.append(f"{path}:{node.lineno} assigns StepState.{changed(target)}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in mutators
            ):
                owner = node.func.value
                name = field_of(owner) or (aliases.get(owner.id) if isinstance(owner, ast.Name) else None)
                if name:
                    found.append(f"{path}:{node.lineno} changes StepState.{name} ({node.func.attr})")
    return sorted(set(found))


def test_only_step_state_changes_the_step_state():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = [
        path
        for path in [*root.glob("torchwm/**/*.py"), *root.glob("plugins/*/torchwm_*/**/*.py")]
        if path.name != "step_state.py"
    ]
    assert files
    assert [write for path in files for write in _step_state_writes(path)] == []


def test_the_writer_check_finds_a_write_outside_step_state(tmp_path):
    code = tmp_path / "backend.py"
    code.write_text(
        "def send(self, w, ids):\n"
        "    self.state.busy[w] = ids\n"
        "    busy = self.state.busy\n"
        "    busy.pop(w)\n"
        "    self._state.in_flight[:] = False\n"
    )
    assert [line.split(" ", 1)[1] for line in _step_state_writes(code)] == [
        "assigns StepState.busy",
        "changes StepState.busy (pop)",
        "assigns StepState.in_flight",
    ]


def test_an_env_whose_episode_ended_is_named_until_reset():
    state = StepState(3, 3)
    terminations = np.array([False, True, False])
    truncations = np.array([False, False, True])
    state.check_not_ended(np.array([0]), terminations, truncations)
    with pytest.raises(
        ValueError, match=r"^envs \[2, 1\] ended their episode and autoreset_mode is 'disabled'"
    ):
        state.check_not_ended(np.array([2, 0, 1]), terminations, truncations)
