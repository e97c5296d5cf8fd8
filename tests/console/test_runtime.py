"""What no other console shows: a group's runtime section (held long polls, revive lag,
blocked FIFO heads, messages in flight with their deadlines, paged by the RPC's token) and
a message's delivery history, each run as the visitor through the admin path; a user
without the permission sees a note in the section's place, a bad page size or token is
refused (400)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from popmq.proxy.server import PopMQServer
from popmq.sdk import AsyncProducer, AsyncSimpleConsumer, Credentials
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import (
    AUTHENTICATED,
    ROOT_KEY,
    ROOT_SECRET,
    browser,
    log_in,
    serving,
)
from tests.console.test_topics import APP_SECRET
from tests.support.run_async import run_async

_INFLIGHT = re.compile(r'<tr data-inflight="([^"]+)">')


def _cells(page: str, attribute: str, value: str) -> list[str]:
    """The cell texts of the row whose `data-<attribute>` is `value`."""
    match = re.search(rf'<tr [^>]*data-{attribute}="{re.escape(value)}">(.*?)</tr>', page, re.S)
    assert match, f"no row {attribute}={value!r}"
    return [
        re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", c)).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", match[1], re.S)
    ]


def _href(link: str) -> str:
    return link.replace("&amp;", "&")


async def _runtime(client: httpx.AsyncClient, group: str, **params: str) -> httpx.Response:
    """The runtime section alone, as the page's htmx polling asks for it."""
    return await client.get(
        "/groups/view",
        params={"name": group, "part": "runtime", **params},
        headers={"hx-request": "true"},
    )


async def _until(server: PopMQServer, group: str, held: int) -> None:
    """Wait until `held` receives of `group` are parked in a long poll."""
    for _ in range(200):
        view = await server.broker.inspect_group(group)
        if sum(h.count for h in view.held_polls) == held:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"group {group!r} never held {held} receives")


@run_async
async def test_a_held_receive_the_revive_lag_and_pages_of_messages_in_flight(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 2)
        async with AsyncProducer(server.address) as producer:
            sent = [await producer.send("orders", b"m%d" % i) for i in range(5)]
        async with (
            AsyncSimpleConsumer(
                server.address, group="billing", topic="orders", client_id="billing-1"
            ) as consumer,
            browser(server) as client,
        ):
            got = []
            while len(got) < 5:
                got += await consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
            page = (await client.get("/groups/view", params={"name": "billing"})).text
            assert 'id="group-runtime"' in page and 'hx-trigger="every 2s"' in page
            assert "No receive is held now" in page
            # Every message in flight, per consumer, whatever the page shows.
            count, earliest = _cells(page, "consumer", "billing-1")[1:]
            assert count == "5" and re.match(r"in (5\d|60) s \(\d{4}-", earliest), earliest

            # Nothing is ready: a receive parks in a long poll, and the section shows it.
            waiting = asyncio.ensure_future(consumer.receive(max_messages=1, wait_s=5))
            await _until(server, "billing", 1)
            section = await _runtime(client, "billing")
            assert section.status_code == 200 and "<html" not in section.text
            assert "1 receive of the group parked" in section.text
            (held,) = re.findall(r'<tr data-held="([^"]+)">', section.text)
            assert held.startswith("orders/")
            assert _cells(section.text, "held", held)[-1] == "1"
            assert "<th>Broker</th>" not in section.text  # one broker: no broker column

            # Redelivery keeps up: no lag, the next deadline a minute away, checkpoints live.
            lag, oldest, following, checkpoints = _cells(section.text, "revive", "local")
            assert (lag, oldest) == ("0.0 s", "none due")
            assert re.match(r"in (5\d|60) s \(\d{4}-\d\d-\d\d ", following), following
            assert int(checkpoints) >= 1
            assert "No FIFO message group of this group is blocked" in section.text

            # In flight, two a page, with the RPC's token: every message once, in order.
            seen: list[str] = []
            link = "/groups/view?name=billing&size=2"
            pages = 0
            while link:
                shown = (await client.get(_href(link))).text
                pages += 1
                rows = _INFLIGHT.findall(shown)
                assert len(rows) <= 2
                for message_id in rows:
                    topic, _, _, found, attempt, holder, popped, until = _cells(
                        shown, "inflight", message_id
                    )
                    assert (topic, found, attempt, holder) == (
                        "orders", message_id, "1", "billing-1"
                    )  # fmt: skip
                    assert re.match(r"(\d+ s ago|now) \(", popped), popped
                    assert re.match(r"in (5\d|60) s \(\d{4}-", until), until
                seen += rows
                following_link = re.search(r'<a href="([^"]+)#runtime" id="inflight-next"', shown)
                link = following_link[1] if following_link else ""
                assert not link or "token=" in link
                assert ('id="inflight-first"' in shown) == (pages > 1)
            assert pages == 3
            assert sorted(seen) == sorted(r.message_id for r in sent)
            assert len(set(seen)) == 5
            # A message id leads to its page.
            first = sent[0]
            message_link = re.search(
                rf'<tr data-inflight="{first.message_id}">.*?<a href="([^"]+)"',
                (await client.get("/groups/view", params={"name": "billing", "size": "5"})).text,
                re.S,
            )
            assert message_link is not None
            message_page = await client.get(_href(message_link[1]))
            assert message_page.status_code == 200 and first.message_id in message_page.text

            async with AsyncProducer(server.address) as producer:
                await producer.send("orders", b"wakes the held receive")
            assert len(await waiting) == 1
            await _until(server, "billing", 0)
            after = await _runtime(client, "billing")
            assert "No receive is held now" in after.text


@run_async
async def test_bad_page_sizes_and_tokens_are_refused_with_a_400(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("billing")
        async with browser(server) as client:
            for params, says in [
                ({"size": "0"}, "size 0 is out of range: 1..1000"),
                ({"size": "1001"}, "size 1001 is out of range: 1..1000"),
                ({"size": "ten"}, "size &#39;ten&#39; is not a whole number"),
                ({"token": "not-a-token"}, "is not one this server issued"),
                ({"token": "1.0.x"}, "is not one this server issued"),
                ({"token": "9" * 201}, "not a page token this server issued"),
            ]:
                for part in ({}, {"part": "runtime"}):
                    answer = await client.get(
                        "/groups/view", params={"name": "billing", **params, **part}
                    )
                    assert answer.status_code == 400, (params, part, answer.text[:300])
                    assert says in answer.text, (params, part)
            bad_part = await client.get("/groups/view", params={"name": "billing", "part": "x"})
            assert bad_part.status_code == 400 and "lag, runtime" in bad_part.text
            empty = (await client.get("/groups/view", params={"name": "billing"})).text
            assert "Nothing in flight" in empty and 'id="inflight-next"' not in empty


@run_async
async def test_a_fifo_groups_blocked_head_and_who_waits_behind_it(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("ordered", 1, message_type="fifo")
        async with AsyncProducer(server.address) as producer:
            head = await producer.send("ordered", b"a0", message_group="a")
            for i in (1, 2):
                await producer.send("ordered", b"a%d" % i, message_group="a")
        async with (
            AsyncSimpleConsumer(server.address, group="billing", topic="ordered") as consumer,
            browser(server) as client,
        ):
            (got,) = await consumer.receive(max_messages=8, invisible_duration_s=60, wait_s=5)
            assert got.message_id == head.message_id
            page = (
                await client.get("/groups/view", params={"name": "billing", "topic": "ordered"})
            ).text
            assert "1 message group waits for a head" in page
            cells = _cells(page, "head", head.message_id)
            assert cells[:6] == [head.message_id, "ordered", "0", "a", "0", "1"]
            assert re.match(r"in (5\d|60) s \(", cells[6]), cells
            assert cells[7:] == ["delivered, in flight", "2"]
            link = re.search(rf'<a href="([^"]+)">{head.message_id}</a>', page)
            assert link is not None and "offset=0" in link[1]
            assert (await client.get(_href(link[1]))).status_code == 200
            # The ones behind it are read and not delivered: in flight as waiting.
            waiting = [m for m in _INFLIGHT.findall(page) if m != head.message_id]
            assert len(waiting) == 2
            assert "waiting behind its message group" in _cells(page, "inflight", waiting[0])[-1]


@run_async
async def test_a_pop_that_named_no_client_shows_unknown_and_client_ids_are_escaped(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        async with AsyncProducer(server.address) as producer:
            first = await producer.send("orders", b"a")
            second = await producer.send("orders", b"b")
        broker = server.broker
        await broker.pop("billing", "orders", max_messages=1, invisible_s=60, wait_s=0)
        await broker.pop("billing", "orders", max_messages=1, invisible_s=90, wait_s=0,
                         client_id="<b>x</b>")  # fmt: skip
        async with browser(server) as client:
            page = (await client.get("/groups/view", params={"name": "billing"})).text
            assert _cells(page, "inflight", first.message_id)[5] == "unknown"
            # Shown as text, never as markup.
            assert _cells(page, "inflight", second.message_id)[5] == "&lt;b&gt;x&lt;/b&gt;"
            assert "<b>x</b>" not in page
            assert _cells(page, "consumer", "")[:2] == ["unknown", "1"]
            where = {"topic": "orders", "queue": first.queue_id, "offset": first.offset}
            history = (await client.get("/messages/view", params=where)).text
            assert _cells(history, "step", "pop")[6] == "unknown"


@run_async
async def test_a_messages_history_after_pop_nack_and_a_retry_copy(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("billing", max_delivery_attempts=2)
        await server.broker.create_group("audit")
        async with AsyncProducer(server.address) as producer:
            sent = await producer.send("orders", b"x")
        async with AsyncSimpleConsumer(
            server.address, group="billing", topic="orders", client_id="billing-1"
        ) as c:
            await c.receive(max_messages=1, invisible_duration_s=1, wait_s=5)
            # Its invisible time passes unacked: copied to the group's retry queue.
            again: list[object] = []
            while not again:
                again = await c.receive(max_messages=1, invisible_duration_s=30, wait_s=5)
            async with browser(server) as client:  # the copy in flight, found by its id
                page = (await client.get("/groups/view", params={"name": "billing"})).text
                cells = _cells(page, "inflight", sent.message_id)
                assert cells[:4] == ["orders", "retry", "0", sent.message_id]
                assert cells[4] == "2"  # its second attempt
                link = re.search(rf'<a href="([^"]+)">{sent.message_id}</a>', page)
                assert link is not None and "id=" in link[1]
                copy = await client.get(_href(link[1]))
                assert copy.status_code == 200 and 'data-step="retry"' in copy.text
            await c.nack(again[0])  # the second and last attempt: it becomes a dead letter
        async with AsyncSimpleConsumer(server.address, group="audit", topic="orders") as c:
            (other,) = await c.receive(max_messages=1, invisible_duration_s=30, wait_s=5)
            await c.ack(other)
        for _ in range(200):
            if (await server.broker.lag_report("billing")).dlq_depth == 1:
                break
            await asyncio.sleep(0.05)
        async with browser(server) as client:
            where = {"topic": "orders", "queue": sent.queue_id, "offset": sent.offset}
            page = (await client.get("/messages/view", params=where)).text
            steps = re.findall(r'<tr id="step-\d+" data-step="([a-z_]+)">', page)
            assert steps[0] == "stored" and steps.count("pop") == 3, steps
            assert {"retry", "nack", "dead_letter"} <= set(steps)
            assert re.findall(r'<option value="([^"]+)"', page) == ["audit", "billing"]
            assert "Not recorded: acks" in page

            only = (await client.get("/messages/view", params={**where, "group": "billing"})).text
            steps = re.findall(r'<tr id="(step-\d+)" data-step="([a-z_]+)">', only)
            kinds = [k for _, k in steps]
            assert kinds == ["stored", "pop", "retry", "pop", "nack", "dead_letter"], kinds
            assert '<option value="billing" selected>' in only
            pop = _cells(only, "step", "pop")  # the first pop
            assert pop[1:5] == ["pop", pop[2], "billing", f"0 · {sent.offset}"]
            assert pop[5:7] == ["1", "billing-1"]  # its attempt and the client that popped
            assert re.match(r"\d{4}-.* \(1\.0 s after\)", pop[7]), pop
            for step in ("retry", "nack", "dead_letter"):  # held, let expire, nacked by it
                assert _cells(only, "step", step)[6] == "billing-1", step
            assert _cells(only, "step", "stored")[6] == ""
            # The retry copy links to its own steps below (retry queues cannot be browsed).
            retry = re.search(r'data-step="retry">.*?<a href="#(step-\d+)" class="copy">'
                              r"%RETRY%billing_orders · 0</a>", only, re.S)  # fmt: skip
            assert retry is not None
            copy_step = dict(steps)[retry[1]]
            assert copy_step == "pop"
            copy_cells = re.search(rf'<tr id="{retry[1]}"[^>]*>(.*?)</tr>', only, re.S)
            assert copy_cells is not None and "retry copy · 0" in copy_cells[1]
            assert re.search(r"<td>2</td>", copy_cells[1])  # the copy's attempt
            # The dead letter links to its page.
            dead = re.search(r'data-step="dead_letter">.*?<a href="([^"]+)" class="copy">'
                             r"%DLQ%billing · 0</a>", only, re.S)  # fmt: skip
            assert dead is not None
            dead_page = await client.get(_href(dead[1]))
            assert dead_page.status_code == 200 and sent.message_id in dead_page.text

            # The message found by its id has the same page (the link of a retry copy).
            by_id = await client.get(
                "/messages/view", params={"topic": "orders", "id": sent.message_id}
            )
            assert by_id.status_code == 200 and 'data-step="retry"' in by_id.text
            both = await client.get("/messages/view", params={**where, "id": sent.message_id})
            assert both.status_code == 400

            # Redriven, the dead letter is stored again with its id, and the broker finds
            # the new copy's history by it: this page says so and links there.
            await server.broker.redrive("billing")
            first = (await client.get("/messages/view", params=where)).text
            assert 'id="history-elsewhere"' in first and 'id="history"' not in first
            moved = re.search(r'id="history-elsewhere">.*?<a href="([^"]+)"', first, re.S)
            assert moved is not None and f"offset={sent.offset}" not in moved[1]
            copy = (await client.get(_href(moved[1]))).text
            assert re.findall(r'data-step="([a-z_]+)"', copy) == ["stored"]


@run_async
async def test_a_normal_user_without_the_permission_sees_a_note_not_a_500(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("billing")
        credentials = Credentials(ROOT_KEY, ROOT_SECRET)
        async with AsyncProducer(server.address, credentials=credentials) as producer:
            sent = await producer.send("orders", b"x")
        async with AsyncSimpleConsumer(
            server.address, group="billing", topic="orders", credentials=credentials
        ) as consumer:
            await consumer.receive(max_messages=1, invisible_duration_s=60, wait_s=5)
        await store.create_user("app", APP_SECRET)
        # May read the group (its page) and the topic's messages, not the topic itself.
        await store.grant(
            "app", Policy(ResourceType.GROUP, Pattern.LITERAL, "billing", frozenset({Action.GET}))
        )
        await store.grant(
            "app", Policy(ResourceType.TOPIC, Pattern.LITERAL, "orders", frozenset({Action.SUB}))
        )
        where = {"topic": "orders", "queue": sent.queue_id, "offset": sent.offset}
        async with browser(server) as client:
            await log_in(client, "app", APP_SECRET)
            page = await client.get("/groups/view", params={"name": "billing"})
            assert page.status_code == 200
            assert _INFLIGHT.findall(page.text) == [sent.message_id]  # GROUP GET suffices
            narrowed = await client.get(
                "/groups/view", params={"name": "billing", "topic": "orders"}
            )
            assert narrowed.status_code == 200
            assert re.search(
                r'id="runtime-refusal">Not allowed: .*may not GET topic', narrowed.text
            ), narrowed.text
            assert 'id="topic-lag"' in narrowed.text  # the rest of the page is there
            assert "part=runtime" not in narrowed.text  # a refused section is not polled
            section = await _runtime(client, "billing", topic="orders")
            assert section.status_code == 200 and "Not allowed" in section.text

            message = await client.get("/messages/view", params=where)
            assert message.status_code == 200 and 'id="body"' in message.text
            assert re.search(r'id="history-refusal">Not allowed: .*may not GET topic', message.text)

            # With TOPIC GET every group's steps show; one group's needs GROUP GET on it.
            await store.grant(
                "app",
                Policy(ResourceType.TOPIC, Pattern.LITERAL, "orders", frozenset({Action.GET})),
            )
            await store.revoke(
                "app",
                Policy(ResourceType.GROUP, Pattern.LITERAL, "billing", frozenset({Action.GET})),
            )
            every = (await client.get("/messages/view", params=where)).text
            assert 'data-step="pop"' in every and "history-refusal" not in every
            one = await client.get("/messages/view", params={**where, "group": "billing"})
            assert one.status_code == 200
            assert re.search(r'id="history-refusal">Not allowed: .*may not GET group', one.text)
            assert (await client.get("/groups/view", params={"name": "billing"})).status_code == 403
