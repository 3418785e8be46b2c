"""Behaviour the mutation run of the Lead queue and the titles reducers found unchecked.

See benchmarks/EVIDENCE.md, Item 5. Each test names the rule it pins and the surviving mutants
it kills. They use the public API of each part alone (``agentturn.lead`` and
``agentturn.titles`` are documented as usable without the turn lifecycle): real events from a
new state, and the documented meaning of the state's fields.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence

import attrs
import pytest

import agentturn as at
from agentturn import lead, titles
from agentturn.lead import Admission, LeadQueue
from agentturn.titles import TitlePhase, TitleState, TitleTrigger

LeadEvent = at.LeadSubmitted | at.LeadSaved | at.LeadSaveFailed
TitleEvent = at.TitleGenerated | at.TitleFailed | at.ManualRename | at.AutoTitlePreferenceChanged

# --- Lead ----------------------------------------------------------------------------------------


def submitted(lead_id: str, text: str = "use tabs", chat_id: str = "chat") -> at.LeadSubmitted:
    return at.LeadSubmitted(chat_id=chat_id, lead_id=lead_id, text=text)


def feed(queue: LeadQueue, events: Sequence[LeadEvent]
         ) -> tuple[LeadQueue, tuple[at.Command, ...]]:
    """Reduce ``events`` from ``queue``; the last step's commands."""
    commands: tuple[at.Command, ...] = ()
    for event in events:
        queue, commands = lead.reduce(queue, event)
    return queue, commands


def busy_queue() -> LeadQueue:
    """An open queue with l1 saved, l2 saving and l3 queued behind it."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    queue, _ = feed(queue, [submitted("l1", "one"), at.LeadSaved(lead_id="l1"),
                            submitted("l2", "two"), submitted("l3", "three")])
    assert (lead.saved_ids(queue), lead.saving_id(queue)) == (("l1",), "l2")
    return queue


def ended_before_save(lead_id: str, text: str) -> at.ReturnDraft:
    return at.ReturnDraft(
        lead_id=lead_id, reason=at.DraftReason.TURN_ENDED_BEFORE_SAVE, draft=text,
        message="The turn ended before this Lead instruction was saved; the text is back in "
                "the composer.")


def stale_save(lead_id: str, event: str = "LeadSaved") -> at.StaleAnswerIgnored:
    return at.StaleAnswerIgnored(event=event, answer_id=lead_id,
                                 reason="this instruction's save is not in flight")


@pytest.mark.req("LD-1", "LD-2", "LD-5", "LD-6", "LD-14")
@pytest.mark.parametrize(("admission", "event", "reason", "message"), [
    (Admission.OPEN, submitted("x", chat_id="other"), at.DraftReason.NOT_OWNER,
     "Lead can only steer the chat whose turn is running."),
    (Admission.CLOSED, submitted("x"), at.DraftReason.NOT_ACTIVE,
     "No turn is running in this chat; send the text as a new message."),
    (Admission.ENDING, submitted("x"), at.DraftReason.TURN_ENDING,
     "The turn is finishing; your text is kept for an ordinary send."),
    (Admission.OPEN, submitted("x", " \n"), at.DraftReason.EMPTY,
     "A Lead instruction needs some text."),
    (Admission.OPEN, submitted("x", "x" * (lead.MAX_LEAD_BYTES + 1)), at.DraftReason.TOO_LONG,
     "A Lead instruction holds at most 32768 bytes; this one has 32769."),
], ids=["NOT_OWNER", "NOT_ACTIVE", "TURN_ENDING", "EMPTY", "TOO_LONG"])
def test_each_refusal_says_exactly_why(admission: Admission, event: at.LeadSubmitted,
                                       reason: at.DraftReason, message: str) -> None:
    """A refused Lead comes back as one ``ReturnDraft`` with its typed reason, its draft and the
    documented message, and the queue is unchanged. Kills the mutants that alter the NOT_OWNER,
    NOT_ACTIVE, TURN_ENDING and EMPTY messages."""
    queue = LeadQueue.create("chat")
    if admission is not Admission.CLOSED:
        queue = lead.open_admission(queue)
    if admission is Admission.ENDING:
        queue, _ = lead.close_admission(queue)
    after, commands = lead.reduce(queue, event)
    assert after is queue
    assert commands == (at.ReturnDraft(lead_id="x", reason=reason, draft=event.text,
                                       message=message),)


@pytest.mark.req("LD-5")
def test_a_ninth_instruction_is_refused_with_the_documented_message() -> None:
    """Eight pending instructions (saved or not): the ninth is refused QUEUE_FULL with the exact
    message (kills the mutants that alter its second sentence)."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    queue, _ = feed(queue, [submitted(f"l{n}") for n in range(lead.MAX_PENDING)])
    _, commands = lead.reduce(queue, submitted("l9", "ninth"))
    assert commands == (at.ReturnDraft(
        lead_id="l9", reason=at.DraftReason.QUEUE_FULL, draft="ninth",
        message="8 Lead instructions are already waiting; send this one after they are "
                "applied."),)


def raised(queue: LeadQueue, event: LeadEvent) -> at.ProtocolError:
    with pytest.raises(at.UnknownId) as caught:
        lead.reduce(queue, event)
    return caught.value


@pytest.mark.req("LD-4")
@pytest.mark.parametrize("event", [at.LeadSaved(lead_id="l9"),
                                   at.LeadSaveFailed(lead_id="l9", reason="io"),
                                   at.LeadSaved(lead_id="l3")], ids=["saved", "failed", "queued"])
def test_an_ack_for_no_save_in_flight_is_refused_with_its_particulars(event: LeadEvent) -> None:
    """An acknowledgement for an id never admitted, or for one still queued behind the save in
    flight, is misuse: ``UnknownId`` naming the part, the phase, the event and what was expected
    (STYLE 6). Kills the mutants of ``_saving_index``'s error arguments."""
    error = raised(busy_queue(), event)
    assert (error.part, error.phase, error.event, error.expected) == (
        "lead", "OPEN", event,
        "an acknowledgement of the instruction whose save is in flight")
    assert str(error) == (
        f"lead: can't handle {type(event).__name__} in phase OPEN; expected an "
        "acknowledgement of the instruction whose save is in flight")


@pytest.mark.req("LD-4")
def test_a_repeated_lead_id_is_refused_with_its_particulars() -> None:
    """A second pending instruction with the id of one already pending and another text: its
    draft comes back with ``DUPLICATE_ID`` and the exact message; the same text is a resend,
    absorbed with its reason; the queue is unchanged either way."""
    queue = busy_queue()
    event = submitted("l2", "again")
    assert lead.reduce(queue, event) == at.Step(queue, (at.ReturnDraft(
        lead_id="l2", reason=at.DraftReason.DUPLICATE_ID, draft="again",
        message="Another Lead instruction already has this id; your text was not sent."),))
    assert lead.reduce(queue, submitted("l2", "two")) == at.Step(queue, (at.StaleAnswerIgnored(
        event="LeadSubmitted", answer_id="l2", reason="this instruction was already received"),))
    other_chat = submitted("l2", "two", chat_id="elsewhere")
    assert lead.reduce(queue, other_chat).commands[0].reason is at.DraftReason.NOT_OWNER


@pytest.mark.req("LD-9", "LD-16", "LD-4")
def test_a_second_ack_after_the_instruction_was_applied_is_a_late_answer() -> None:
    """Instructions handed to the model at a boundary have left the queue; a repeated
    acknowledgement of one of them is absorbed, not misuse (kills ``take_saved`` forgetting the
    ids it handed over)."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    queue, _ = feed(queue, [submitted("l1"), at.LeadSaved(lead_id="l1"),
                            submitted("l2"), at.LeadSaved(lead_id="l2")])
    queue, taken = lead.take_saved(queue)
    assert taken == ("l1", "l2") and queue.entries == ()
    for lead_id in taken:
        after, commands = lead.reduce(queue, at.LeadSaved(lead_id=lead_id))
        assert after is queue and commands == (stale_save(lead_id),)


@pytest.mark.req("LD-13", "LD-4")
def test_release_reports_saved_ones_and_returns_unsaved_ones_as_drafts() -> None:
    """Released early, with a save still in flight and one queued behind it: the saved
    instruction is reported unapplied, the two unsaved ones come back as drafts, in queue order;
    the queue is closed and empty, and the late acknowledgement of any of the three is absorbed
    (kills ``release`` dropping a draft and forgetting the ids that left)."""
    queue, commands = lead.release(busy_queue())
    assert commands == (at.LeadUnapplied(lead_id="l1"), ended_before_save("l2", "two"),
                        ended_before_save("l3", "three"))
    assert queue.admission is Admission.CLOSED and queue.entries == ()
    assert not lead.has_unsaved(queue) and not lead.is_offered(queue)
    for lead_id in ("l1", "l2", "l3"):
        assert lead.reduce(queue, at.LeadSaved(lead_id=lead_id)).commands == (
            stale_save(lead_id),)


@pytest.mark.req("LD-13", "LD-14", "TL-11")
def test_suspend_keeps_saved_ones_and_returns_unsaved_ones_as_drafts() -> None:
    """Suspended early (a resumable error), with a save in flight and one queued: the saved
    instruction stays pending, unreported; the unsaved ones come back as drafts and leave the
    queue, whose late acknowledgements are absorbed. Reopened by ``ContinueTurn``, the saved
    one is what the next boundary takes (kills ``suspend`` dropping or breaking the drafts,
    keeping the unsaved entries and forgetting the ids that left)."""
    queue, commands = lead.suspend(busy_queue())
    assert commands == (ended_before_save("l2", "two"), ended_before_save("l3", "three"))
    assert queue.admission is Admission.CLOSED
    assert [entry.lead_id for entry in queue.entries] == ["l1"]
    assert lead.saved_ids(queue) == ("l1",) and not lead.has_unsaved(queue)
    for lead_id in ("l2", "l3"):
        assert lead.reduce(queue, at.LeadSaveFailed(lead_id=lead_id, reason="io")).commands == (
            stale_save(lead_id, "LeadSaveFailed"),)
    reopened = lead.open_admission(queue)
    assert lead.take_saved(reopened)[1] == ("l1",)


@pytest.mark.req("LD-14", "LD-4")
def test_closing_admission_returns_queued_drafts_and_keeps_the_save_in_flight() -> None:
    """Admission closes: the queued instruction comes back as a draft and has left the queue
    (an acknowledgement naming it is absorbed, like any id that left); the one saving stays and
    its acknowledgement is taken; the saved one stays (kills ``close_admission`` remembering the
    wrong ids, or none)."""
    queue, commands = lead.close_admission(busy_queue())
    assert commands == (ended_before_save("l3", "three"),)
    assert queue.admission is Admission.ENDING
    assert [(e.lead_id, e.status) for e in queue.entries] == [
        ("l1", lead.LeadStatus.SAVED), ("l2", lead.LeadStatus.SAVING)]
    assert lead.reduce(queue, at.LeadSaved(lead_id="l3")).commands == (stale_save("l3"),)
    queue, commands = lead.reduce(queue, at.LeadSaved(lead_id="l2"))
    assert commands == () and lead.saved_ids(queue) == ("l1", "l2")


@pytest.mark.req("LD-4")
def test_the_queue_remembers_the_last_eight_ids_that_left_it() -> None:
    """``recent`` holds the ids that left the queue, the newest eight, oldest first: those
    still get a late-answer notice; older ones are misuse again. Checked after a close, a
    boundary and a release (kills each of them recording the wrong ids)."""
    queue = lead.open_admission(LeadQueue.create("chat"))
    names = [f"l{n}" for n in range(6)]
    queue, _ = feed(queue, [submitted(n) for n in names])  # l0 saving, the rest queued
    queue, _ = lead.close_admission(queue)  # l1..l5 leave
    assert queue.recent == ("l1", "l2", "l3", "l4", "l5")
    queue, _ = feed(queue, [at.LeadSaved(lead_id="l0")])
    queue = lead.open_admission(queue)
    queue, _ = lead.take_saved(queue)  # l0 leaves
    queue, _ = feed(queue, [submitted("m1"), at.LeadSaved(lead_id="m1"), submitted("m2"),
                            submitted("m3")])
    queue, _ = lead.release(queue)  # m1 (saved), m2 (saving), m3 (queued) leave
    assert queue.recent == ("l2", "l3", "l4", "l5", "l0", "m1", "m2", "m3")
    assert lead.reduce(queue, at.LeadSaved(lead_id="l2")).commands == (stale_save("l2"),)
    with pytest.raises(at.UnknownId):
        lead.reduce(queue, at.LeadSaved(lead_id="l1"))


# --- titles --------------------------------------------------------------------------------------


def play(events: Sequence[TitleEvent], state: TitleState | None = None
         ) -> tuple[TitleState, tuple[at.Command, ...]]:
    """Reduce ``events`` from ``state`` (a new chat "c" by default); the last commands."""
    state = TitleState.create("c") if state is None else state
    commands: tuple[at.Command, ...] = ()
    for event in events:
        state, commands = titles.reduce(state, event)
    return state, commands


def asked(state: TitleState) -> TitleState:
    """``state`` after its naming request went out (it must be due)."""
    step = titles.request_if_due(state, TitleTrigger.USABLE_RESPONSE)
    assert step.commands == (at.RequestTitle(chat_id=state.chat_id,
                                             request_id=step.state.request_id),)
    return step.state


def type_problems(state: TitleState) -> list[str]:
    """The fields of ``state`` whose value is not of the declared type (bool is not int)."""
    attrs.resolve_types(TitleState)
    problems = []
    for field in attrs.fields(TitleState):
        value = getattr(state, field.name)
        kind = field.type
        assert isinstance(kind, type) and typing.get_origin(kind) is None
        if type(value) is not kind:
            problems.append(f"{field.name}={value!r} is not {kind.__name__}")
    return problems


def failed_once() -> TitleState:
    state = asked(TitleState.create("c"))
    return play([at.TitleFailed(request_id="c/title-1", reason="offline")], state)[0]


@pytest.mark.req("TT-6")
def test_a_new_turn_only_clears_the_per_turn_try() -> None:
    """After a failed naming, a new turn may try again: the state is the failed one but for
    ``tried_this_turn``, which is ``False`` (a bool), and the next request is title-2. Kills
    ``new_turn`` storing ``None``."""
    state = failed_once()
    assert titles.new_turn(state) is not state
    fresh = titles.new_turn(state)
    assert fresh == attrs.evolve(state, tried_this_turn=False)
    assert not type_problems(fresh), type_problems(fresh)
    assert titles.new_turn(fresh) is fresh
    assert asked(fresh).request_id == "c/title-2"


SCRIPTS: dict[str, list[TitleEvent]] = {
    "named": [at.TitleGenerated(request_id="c/title-1", title=" T ")],
    "failed": [at.TitleFailed(request_id="c/title-1", reason="offline")],
    "empty": [at.TitleGenerated(request_id="c/title-1", title=" ")],
    "off then on": [at.AutoTitlePreferenceChanged(enabled=False),
                    at.AutoTitlePreferenceChanged(enabled=True)],
    "off during naming": [at.AutoTitlePreferenceChanged(enabled=False),
                          at.TitleGenerated(request_id="c/title-1", title="T")],
    "renamed during naming": [at.ManualRename(title="Mine"),
                              at.TitleFailed(request_id="c/title-1", reason="offline")],
}


@pytest.mark.req("TT-4", "TT-5", "TT-6")
@pytest.mark.parametrize("script", list(SCRIPTS), ids=str)
def test_every_title_state_keeps_its_declared_types(script: str) -> None:
    """Every field of every state a naming request's life goes through has its declared type:
    a phase, bools, ints and the chat id (kills the mutants that store ``None``)."""
    state = asked(TitleState.create("c"))
    for event in SCRIPTS[script]:
        state, _ = titles.reduce(state, event)
        assert not type_problems(state), (event, type_problems(state))
        state = titles.new_turn(state)
        assert not type_problems(state), (event, type_problems(state))


@pytest.mark.req("TT-4")
def test_turning_titles_back_on_makes_a_title_due_again() -> None:
    """Off, then on again before any naming: the next moment asks for a title (kills the
    preference change storing ``None``)."""
    state, commands = play([at.AutoTitlePreferenceChanged(enabled=False),
                            at.AutoTitlePreferenceChanged(enabled=True)])
    assert commands == () and state.enabled is True and titles.is_due(state)
    assert asked(state).request_id == "c/title-1"


@pytest.mark.req("TT-4", "TT-3")
def test_a_result_dropped_because_titles_are_off_leaves_the_chat_unnamed_and_free() -> None:
    """Titles turned off while naming ran: the result is dropped, no request is in flight any
    more (the turn goes on), the chat is UNNAMED and no failure is counted; turned back on, a
    later turn asks again. Kills the mutants that keep the phase NAMING, store ``None``, or
    return no state."""
    state = asked(TitleState.create("c"))
    state, commands = play([at.AutoTitlePreferenceChanged(enabled=False),
                            at.TitleGenerated(request_id="c/title-1", title="Greeting")], state)
    assert commands == ()
    assert isinstance(state, TitleState)
    assert state.phase is TitlePhase.UNNAMED and not titles.naming_in_flight(state)
    assert (state.failures, state.requests, state.enabled) == (0, 1, False)
    state, _ = play([at.AutoTitlePreferenceChanged(enabled=True)], state)
    assert titles.request_if_due(state, TitleTrigger.TOOL_ROUND).commands == ()  # tried
    assert asked(titles.new_turn(state)).request_id == "c/title-2"


@pytest.mark.req("TT-4", "TT-5", "TT-6")
@pytest.mark.parametrize("why", ["off", "renamed", "named", "tried", "in flight", "exhausted"])
def test_a_moment_when_no_title_is_due_changes_nothing(why: str) -> None:
    """When no title is due, ``request_if_due`` returns the very same state and no command
    (kills it returning no state)."""
    events: dict[str, list[TitleEvent]] = {
        "off": [at.AutoTitlePreferenceChanged(enabled=False)],
        "renamed": [at.ManualRename(title="Mine")],
        "named": [], "tried": [], "in flight": [], "exhausted": [],
    }
    state, _ = play(events[why], TitleState.create("c", max_attempts=1))
    if why in ("named", "tried", "in flight", "exhausted"):
        state = asked(state)
    if why == "named":
        state, _ = play([at.TitleGenerated(request_id="c/title-1", title="T")], state)
    if why in ("tried", "exhausted"):
        state, _ = play([at.TitleFailed(request_id="c/title-1", reason="offline")], state)
    if why == "exhausted":
        state = titles.new_turn(state)
    after, commands = titles.request_if_due(state, TitleTrigger.USABLE_RESPONSE)
    assert after is state and commands == ()


@pytest.mark.req("TT-6")
def test_a_chat_tries_three_naming_requests_by_default() -> None:
    """``TitleState.create`` without ``max_attempts``: after three failed requests, each in its
    own turn, no fourth is made (kills a default of 4)."""
    state = TitleState.create("c")
    for number in (1, 2, 3):
        state = asked(titles.new_turn(state))
        state, _ = play([at.TitleFailed(request_id=f"c/title-{number}", reason="x")], state)
    state = titles.new_turn(state)
    assert not titles.is_due(state)
    assert titles.request_if_due(state, TitleTrigger.USABLE_RESPONSE).commands == ()


@pytest.mark.req("TT-4")
def test_zero_attempts_is_allowed_and_never_asks() -> None:
    """``max_attempts=0`` is valid ("zero or more") and means no naming request is ever made
    (kills the bound mutated to refuse zero)."""
    state = TitleState.create("c", max_attempts=0)
    assert state.max_attempts == 0 and not titles.is_due(state)
    after, commands = titles.request_if_due(state, TitleTrigger.TOOL_ROUND)
    assert after is state and commands == ()


@pytest.mark.req("TT-6")
@pytest.mark.parametrize(("arguments", "message"), [
    ({"chat_id": ""}, "TitleState.chat_id must be a non-empty id"),
    ({"chat_id": 7}, "TitleState.chat_id must be a non-empty id"),
    ({"chat_id": "c", "enabled": 1}, "TitleState.enabled must be a bool"),
    ({"chat_id": "c", "max_attempts": -1},
     "TitleState.max_attempts must be an int that is zero or more"),
    ({"chat_id": "c", "max_attempts": True},
     "TitleState.max_attempts must be an int that is zero or more"),
    ({"chat_id": "c", "max_attempts": 2.0},
     "TitleState.max_attempts must be an int that is zero or more"),
], ids=["empty id", "int id", "int enabled", "negative", "bool attempts", "float attempts"])
def test_bad_create_arguments_raise_a_field_error_naming_the_field(
        arguments: dict[str, typing.Any], message: str) -> None:
    """``TitleState.create`` refuses each bad argument with ``FieldError`` whose message names
    the field exactly (kills the mutants of the checks and of the three messages)."""
    with pytest.raises(at.FieldError) as caught:
        TitleState.create(**arguments)
    assert str(caught.value) == message


@pytest.mark.req("TT-6")
@pytest.mark.parametrize("event", [
    at.TitleGenerated(request_id="other/title-1", title="forged"),
    at.TitleFailed(request_id="other/title-1", reason="x"),
    at.TitleGenerated(request_id="c/title-2", title="early"),
], ids=["another chat's", "another chat's failure", "never issued"])
def test_a_result_for_a_request_this_chat_never_made_is_refused_with_its_particulars(
        event: at.TitleGenerated | at.TitleFailed) -> None:
    """A naming result whose id this chat never issued (another chat's id, or a number not
    reached) is misuse: ``UnknownId`` with the part, the phase, the event and what was expected,
    and the state is unchanged. Kills ``issued`` accepting another chat's prefix and the
    mutants of the error's arguments."""
    state = asked(TitleState.create("c"))
    with pytest.raises(at.UnknownId) as caught:
        titles.reduce(state, event)
    error = caught.value
    assert (error.part, error.phase, error.event, error.expected) == (
        "titles", "NAMING", event, "a naming result for a request this chat made")
    assert titles.naming_in_flight(state) and state.request_id == "c/title-1"


@pytest.mark.req("TT-6")
def test_the_answer_to_an_earlier_request_is_absorbed() -> None:
    """With title-2 in flight, the late answer to title-1 is a ``StaleAnswerIgnored`` and
    changes nothing; title-2's answer then names the chat."""
    state = asked(titles.new_turn(failed_once()))
    late = at.TitleGenerated(request_id="c/title-1", title="late")
    after, commands = titles.reduce(state, late)
    assert after is state and commands == (at.StaleAnswerIgnored(
        event="TitleGenerated", answer_id="c/title-1",
        reason="no longer waiting for this naming request"),)
    state, commands = play([at.TitleGenerated(request_id="c/title-2", title="Now")], state)
    assert commands == (at.SetTitle(chat_id="c", title="Now"),)
    assert state.phase is TitlePhase.NAMED

