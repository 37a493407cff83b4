"""A Ray Compiled Graph that steps every actor of a ``ray`` vector env at once.

A step of all envs sent as ordinary actor calls costs more per actor than one execution of a
compiled graph, whose shared-memory channels Ray reads by polling (docs/performance.md compares
them). `CompiledStep` is part of one vector env's pool state (`torchwm_ray.pool_state`), used by
its handles: each stages its actor's actions, the last one sends the step, and each reads its own
actor's result once.
A graph's result cannot be read twice, so a step past its deadline is lost
(`torchwm.errors.StepLost`), and a graph does not survive the death of an actor
(`torchwm.errors.WorkerGone`).
"""

from __future__ import annotations

import collections
import logging
import pickle
import time
from typing import Any

import ray
import ray.exceptions
from ray.dag import InputNode, MultiOutputNode

from torchwm.errors import StepLost, WorkerGone
from torchwm.plugin_api import Deadline
from torchwm_ray.failures import RAY_GONE, ActorEnd, EnvFailure, lost_ray


class CompiledStep:
    """One Ray Compiled Graph that steps every actor at once, shared by the pool's Ray handles.

    Each handle `stage`s its actor's actions; the last one sends the step. Each then reads its own
    actor's result (`result`), once. Compiled at the first step; torn down when an interrupted step
    left its channels out of step with its executions (``stale``), before the next use.
    """

    def __init__(self, start_timeout: float) -> None:
        self.start_timeout = start_timeout  # the least time the first step gets (it starts the actors' loops)
        self.members: list[ActorEnd] = []  # the graph's actors' handles, in graph order
        self.graph: Any = None
        self.staged: dict[int, Any] = {}  # handle index -> its actions, until every member has staged
        self.refs: dict[int, Any] = {}  # handle index -> its result of the step in flight, until read
        self.failure: BaseException | None = None  # Ray's error on sending the step (an actor died)
        self.running = False  # a step was sent whose results were not all read
        self.sent = 0.0  # when the step in flight was sent (time.monotonic)
        self.latencies: collections.deque[float] = collections.deque(maxlen=16)  # recent steps, s
        self.warm = False  # the first step of a new graph also starts its actors' loops
        self.stale = False

    def stage(self, handle: ActorEnd, actions: Any) -> None:
        self.staged[handle.index] = actions
        if len(self.staged) < len(self.members):
            return
        actions_in_order = [self.staged.pop(member.index) for member in self.members]
        self.settle()
        try:
            if self.graph is None:
                with InputNode() as actions_of:
                    steps = [m.actor.step_all.bind(actions_of[k]) for k, m in enumerate(self.members)]
                timeout = self.members[0].timeout
                self.graph = MultiOutputNode(steps).experimental_compile(
                    _submit_timeout=-1 if timeout is None else timeout
                )  # -1: Ray's "no limit"
                self.warm = False
            self.sent = time.monotonic()
            self.running = True
            refs = self.graph.execute(*actions_in_order)
        except (ray.exceptions.RayActorError, ray.exceptions.RayChannelError) as exc:
            self.failure = exc  # an actor died: compiling or sending to it fails; each result() reports it
            refs = [None] * len(self.members)
        except Exception as exc:
            if ray.is_initialized():
                raise
            self.failure = exc  # Ray was shut down: each result() reports it
            refs = [None] * len(self.members)
        self.refs = {member.index: ref for member, ref in zip(self.members, refs, strict=True)}

    def result(self, handle: ActorEnd, deadline: Deadline) -> tuple | EnvFailure | None:
        """``handle``'s actor's result of the step (None: the step was abandoned). Raises `StepLost` past
        the deadline, `WorkerGone` if an actor died, and Ray's ``RayTaskError`` for an error of the graph
        itself."""
        if self.stale or handle.index not in self.refs:
            return None
        ref = self.refs.pop(handle.index)
        if self.failure is not None:
            self._failed(self.failure)
        # Ray reads a channel by polling shared memory (a sched_yield loop), so a driver that waits at
        # once takes a core from the actors it waits for, a large share of a step when the actors have
        # every core. Sleep most of the shortest recent step first; the poll does the rest.
        if self.latencies and len(self.refs) == len(self.members) - 1:
            nap = 0.7 * min(self.latencies) - (time.monotonic() - self.sent)
            if nap > 0:
                time.sleep(min(nap, deadline.remaining(forever=nap) or 0.0))
        # The first step of a new graph waits for its actors to start their loops (seconds on a busy
        # machine), which is part of starting the actors, so it gets their time limit.
        timeout = deadline.remaining(forever=-1.0) or 0.0  # -1: Ray's "no limit"
        if not self.warm and deadline.at is not None:
            timeout = max(timeout, self.start_timeout)
        try:
            if not ray.is_initialized():  # ray.get() would start a new local Ray
                raise ray.exceptions.RayChannelError("Ray was shut down")
            outcome = pickle.loads(ray.get(ref, timeout=timeout))
        except ray.exceptions.RayTaskError:  # not an env's error (step_all returns those): the step is over
            self._step_read()
            raise
        except ray.exceptions.RayChannelTimeoutError:
            late = self._late_actors() or self.members
            raise StepLost(
                ", ".join(m.describe() for m in late), ", or compiled_graph=False to be able to recv() again"
            ) from None
        except (ray.exceptions.RayActorError, ray.exceptions.RayChannelError) as exc:
            self._failed(exc)
        except BaseException as exc:  # Ray itself went away (ray.shutdown()): Ray's error is then any error
            gone = lost_ray(exc)  # raises anything else again (Ctrl-C: the pool abandons the step)
            self.refs.clear()
            self.running = False
            raise gone from None
        self._step_read()
        return outcome

    def _step_read(self) -> None:
        """One result was read: after the last one, the step is over."""
        if not self.refs:
            self.running = False
            if self.warm:  # the first step's time says nothing of the next ones
                self.latencies.append(time.monotonic() - self.sent)
            self.warm = True

    def _late_actors(self) -> list[ActorEnd]:
        """The actors still in the graph's step, asked with ordinary calls (a result read from the graph
        covers every actor, so a timeout of it does not say which one is late)."""
        asked = [m.actor.in_graph_step.remote() for m in self.members]
        ray.wait(asked, num_returns=len(asked), timeout=5)
        late = []
        for member, ref in zip(self.members, asked, strict=True):
            try:
                if ray.get(ref, timeout=0):
                    late.append(member)
            except Exception:  # no answer (an actor held in C code, or dead): it did not finish either
                late.append(member)
        return late

    def _failed(self, exc: BaseException) -> None:
        """The graph broke (an actor died): tear it down and raise `WorkerGone` naming every actor lost."""
        self.refs.clear()
        self.teardown(kill_actors=False)
        # ray.shutdown() in another thread tears down every graph first (killing its actors; our teardown
        # waits for it), then disconnects: give it a moment, since it is no actor's death, and no call to Ray
        # may be made once it is done, which would start a new local Ray.
        until = time.monotonic() + 5.0
        while True:
            if not ray.is_initialized():
                raise WorkerGone(RAY_GONE, restartable=False) from None
            if time.monotonic() >= until:
                break
            time.sleep(0.05)
        # The graph's error does not say which actor died: those on a node Ray declared dead, and those
        # that do not answer an ordinary call (asked all at once, briefly).
        try:
            dead_nodes = {node["NodeID"] for node in ray.nodes() if not node["Alive"]}
            asked = {m.index: m.actor.describe.remote() for m in self.members if m.node_id not in dead_nodes}
            ray.wait(list(asked.values()), num_returns=len(asked), timeout=10)
            dead = []
            for member in self.members:
                if member.index in asked:
                    try:
                        ray.get(asked[member.index], timeout=0)
                        continue
                    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                        pass
                dead.append(member)
        except BaseException as error:
            raise lost_ray(error) from None
        if not ray.is_initialized():  # ray.shutdown() tears down the graphs first: the actors did not die
            raise lost_ray(exc) from None
        if not dead:  # every actor answers: the graph itself broke, or ray.shutdown() tears it down
            try:
                gone = lost_ray(exc)
            except BaseException:
                gone = WorkerGone(f"{type(exc).__name__} in the compiled graph", restartable=False)
            raise gone from None
        gone = dead[0].lost(exc, also=dead[1:])
        gone.reason = f"{gone.reason} (in the compiled graph)"
        gone.args = (gone.reason,)
        gone.worker = dead[0].index
        raise gone from None

    def abandon(self) -> None:
        """A step was given up midway (Ctrl-C): its channels no longer match its executions."""
        self.staged.clear()
        if self.refs:
            self.refs.clear()
            self.stale = True

    def settle(self) -> None:
        """Before any actor call: tear down a stale graph, which waits for its interrupted step to end (else a
        reset could run beside it in the actor, and the step would move the env on past the reset)."""
        if self.stale:
            self.teardown(kill_actors=False)

    def teardown(self, kill_actors: bool) -> None:
        graph, self.graph = self.graph, None
        self.stale = self.running = False
        self.failure = None
        # With kill_actors the actors were killed first (see RayActorHandle.stop): Ray would log a
        # traceback for each task it can no longer cancel, which says nothing the user does not know.
        graph_logger = logging.getLogger("ray.dag.compiled_dag_node")
        level = graph_logger.level
        if kill_actors:
            graph_logger.setLevel(logging.CRITICAL)
        try:
            if graph is not None and ray.is_initialized():
                graph.teardown(kill_actors=kill_actors)
        except Exception:
            pass  # a graph whose actor died may fail to tear down cleanly; its actors are killed at close()
        finally:
            graph_logger.setLevel(level)
