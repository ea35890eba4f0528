"""Wake-ups across daemons: a pass that queues jobs NOTIFYs, every listener claims at once.

On a real PostgreSQL: the listener is a second connection, as each daemon of a fleet has.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from tests.unit.catalog.helpers import TIERS, add_checkpoint
from tierd.config import Config
from tierd.daemon.catalog.db import Database
from tierd.daemon.catalog.dialect import libpq_url, notify_jobs, notify_steps
from tierd.daemon.context import Context
from tierd.daemon.pipeline.listen import JobListener
from tierd.daemon.pipeline.scheduler import schedule_pass
from tierd.daemon.pipeline.service import BACKSTOP_POLLS, PipelineService


def _cut_listeners(url: str) -> int:
    """Terminate the listening sessions, as a PostgreSQL restart or a network cut would."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        ).fetchall()
    return len(rows)


async def _read_up_to_a_last_one(db: Database, listeners: list[JobListener], sent: int) -> None:
    """Send one more notification, naming no listening node; return once each listener read it.

    ``sent``: how many the test sent before. The catalog delivers notifications in the order
    of their commits, so a listener that has read ``sent + 1`` has read, and acted on, every
    one committed before the last: one sent by mistake too.
    """
    with db.session() as session:
        notify_jobs(session, {"nobody"})
    await asyncio.wait_for(asyncio.gather(*(listener.heard.past(sent) for listener in listeners)), 5)


async def test_a_pass_that_queues_jobs_wakes_every_daemon_that_may_claim_them(pg_db: Database) -> None:
    heard = [asyncio.Event(), asyncio.Event()]
    back = asyncio.Event()
    listeners = [JobListener(pg_db.url, f"n{i}", event.set, back.set) for i, event in enumerate(heard)]
    for listener in listeners:
        listener.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(lis.listening.wait() for lis in listeners)), 10)
        add_checkpoint(pg_db, 1)
        assert await asyncio.to_thread(schedule_pass, pg_db, TIERS) == 1
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in heard)), 5)

        for event in heard:
            event.clear()
        assert await asyncio.to_thread(schedule_pass, pg_db, TIERS) == 0
        await _read_up_to_a_last_one(pg_db, listeners, sent=1)  # the first pass's
        assert not any(event.is_set() for event in heard), "a pass that queued nothing woke the fleet"

        assert _cut_listeners(pg_db.url) == 2
        await asyncio.wait_for(back.wait(), 15)  # reconnected: the daemon asks for a full pass
        await asyncio.wait_for(asyncio.gather(*(lis.listening.wait() for lis in listeners)), 15)
        add_checkpoint(pg_db, 2)
        assert await asyncio.to_thread(schedule_pass, pg_db, TIERS) == 1
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in heard)), 5)
    finally:
        for listener in listeners:
            await listener.stop()


async def test_wake_ups_name_what_to_schedule(
    make_config: Callable[..., Config], sqlite_db: Database
) -> None:
    ctx = Context(config=make_config(), db=sqlite_db)
    assert ctx.take_scheduling() is None  # start-up: every checkpoint
    assert ctx.take_scheduling() == set()
    ctx.wake_pipeline(3)
    ctx.wake_pipeline(5)
    assert ctx.pipeline_wakeup.is_set()
    assert ctx.take_scheduling() == {3, 5}
    ctx.pipeline_wakeup.clear()
    ctx.wake_claims()  # another node queued jobs: claim, schedule nothing
    assert ctx.pipeline_wakeup.is_set()
    assert ctx.take_scheduling() == set()
    ctx.wake_pipeline(3)
    ctx.wake_pipeline()  # everything wins over a few
    ctx.wake_pipeline(4)
    assert ctx.take_scheduling() is None


async def test_part_jobs_wake_only_their_own_nodes(pg_db: Database) -> None:
    heard = {node: asyncio.Event() for node in ("n0", "n1", "n2")}
    listeners = [JobListener(pg_db.url, node, event.set, lambda: None) for node, event in heard.items()]
    for listener in listeners:
        listener.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(lis.listening.wait() for lis in listeners)), 10)
        with pg_db.session() as session:
            notify_jobs(session, {"n0", "n2"})  # jobs copying n0's and n2's parts
        await asyncio.wait_for(asyncio.gather(heard["n0"].wait(), heard["n2"].wait()), 5)
        await _read_up_to_a_last_one(pg_db, listeners, sent=1)
        assert not heard["n1"].is_set(), "a node was woken for jobs only other nodes can claim"
        with pg_db.session() as session:
            notify_jobs(session, {f"node-{i:05d}" for i in range(2000)})  # too long for a payload
        await asyncio.wait_for(heard["n1"].wait(), 5)  # so: everyone
    finally:
        for listener in listeners:
            await listener.stop()


async def test_only_the_leader_reads_every_checkpoint_at_each_poll(
    make_config: Callable[..., Config], sqlite_db: Database
) -> None:
    ctx = Context(config=make_config(), db=sqlite_db)
    service = PipelineService(ctx)
    ctx.take_scheduling()
    ctx.leader = False  # another daemon of the fleet leads: its full pass queues the jobs
    taken = []
    for _ in range(BACKSTOP_POLLS):
        service._poll()
        taken.append(ctx.take_scheduling())
    assert taken == [set()] * (BACKSTOP_POLLS - 1) + [None]  # claims; a full pass as a backstop
    ctx.leader = True
    service._poll()
    assert ctx.take_scheduling() is None


async def test_an_idle_listener_sets_no_timer_it_only_waits_on_its_socket(
    pg_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """psycopg's ``notifies()`` woke every 0.1 s with nothing to read: an idle fleet's CPU."""
    loop = asyncio.get_running_loop()
    timers: list[str] = []
    call_later = loop.call_later

    def counted(
        delay: float, callback: Callable[..., object], *args: Any, **kwargs: Any
    ) -> asyncio.TimerHandle:
        timers.append(f"{callback.__module__}.{callback.__qualname__}")
        return call_later(delay, callback, *args, **kwargs)

    heard = asyncio.Event()
    listener = JobListener(pg_db.url, "n0", heard.set, lambda: None)
    listener.start()
    try:
        await asyncio.wait_for(listener.listening.wait(), 10)
        monkeypatch.setattr(loop, "call_later", counted)  # from here on: the listener waits
        with pg_db.session() as session:
            notify_jobs(session, {"n0"})
        await asyncio.wait_for(heard.wait(), 5)
        await _read_up_to_a_last_one(pg_db, [listener], sent=1)
        assert [t for t in timers if t.startswith("psycopg")] == []
    finally:
        await listener.stop()


async def test_steps_notifications_wake_the_other_daemons_sweeps_not_the_senders(pg_db: Database) -> None:
    """One connection hears both channels; a steps notification is not a jobs one, nor the reverse."""
    jobs = {node: asyncio.Event() for node in ("n0", "n1")}
    steps = {node: asyncio.Event() for node in ("n0", "n1")}
    listeners = [
        JobListener(pg_db.url, node, jobs[node].set, lambda: None, steps[node].set) for node in ("n0", "n1")
    ]
    for listener in listeners:
        listener.start()
    try:
        await asyncio.wait_for(asyncio.gather(*(lis.listening.wait() for lis in listeners)), 10)
        with pg_db.session() as session:
            notify_steps(session, "n0")  # n0 left a step waiting
        await asyncio.wait_for(steps["n1"].wait(), 5)
        await _read_up_to_a_last_one(pg_db, listeners, sent=1)
        assert not steps["n0"].is_set(), "a daemon's own steps notification woke its sweep"
        assert not any(event.is_set() for event in jobs.values()), "a steps notification woke the claims"
        with pg_db.session() as session:
            notify_jobs(session, None)
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in jobs.values())), 5)
        await _read_up_to_a_last_one(pg_db, listeners, sent=3)
        assert not steps["n0"].is_set()

        steps["n1"].clear()
        assert _cut_listeners(pg_db.url) == 2
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in steps.values())), 15)  # reconnected
    finally:
        for listener in listeners:
            await listener.stop()
