"""The groups pages: the list over many groups (server-side search and pages, bad pages
refused), a group's settings and POP-aware lag, settings update, offset reset (warning
with what is in flight, forced only with the typed name), the dead letters peeked without
consuming and redriven (the oldest few, those ticked, or all with the typed name), delete
with the typed name; every change through the admin path with its audit line; a NORMAL
user refused and not offered what its policies forbid."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from popmq.proxy.server import PopMQServer
from popmq.sdk import AsyncProducer, AsyncSimpleConsumer
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import (
    AUTHENTICATED,
    ROOT_KEY,
    ROOT_SECRET,
    AuditLines,
    browser,
    csrf_of,
    log_in,
    serving,
)
from tests.console.test_topics import APP_SECRET
from tests.support.run_async import run_async

_ROW = re.compile(r'<tr data-group="([^"]+)">')
_MESSAGE_ROW = re.compile(r'<tr data-message="([^"]+)">')


def _rows(page: str) -> list[str]:
    return _ROW.findall(page)


def _cells(page: str, row: str) -> list[str]:
    """The cell texts of the table row whose data attribute is `row`."""
    match = re.search(rf'<tr data-[a-z]+="{re.escape(row)}">(.*?)</tr>', page, re.S)
    assert match, f"no row {row!r}"
    return [
        re.sub(r"<[^>]+>", "", c).strip()
        for c in re.findall(r"<td[^>]*>(.*?)</td>", match[1], re.S)
    ]


async def _dead_letters(server: PopMQServer, group: str, count: int) -> None:
    """Wait until `count` dead letters of `group` are stored (a nack's move to the
    dead-letter topic is the revive job's, shortly after)."""
    for _ in range(200):
        if (await server.broker.lag_report(group)).dlq_depth == count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"group {group!r} never had {count} dead letters")


@run_async
async def test_bad_list_pages_sizes_and_names_are_refused_not_clamped(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_group("g1")
        async with browser(server) as client:
            for path, params, says in [
                ("/groups", {"page": "0"}, "page 0 is out of range: 1..1000000000"),
                ("/groups", {"page": "two"}, "page &#39;two&#39; is not a whole number"),
                ("/groups", {"page": "2"}, "page 2 is beyond the last page, 1"),
                ("/topics", {"page": "5"}, "page 5 is beyond the last page, 1"),
                ("/groups", {"q": "x" * 201}, "q is 201 characters long; at most 200"),
                ("/groups/view", {}, "name is required"),
                ("/groups/dlq", {"name": "g1", "size": "257"}, "size 257 is out of range: 1..256"),
            ]:
                answer = await client.get(path, params=params)
                assert answer.status_code == 400, (path, params)
                assert says in answer.text, (path, params, answer.text)
            missing = await client.get("/groups/view", params={"name": "nope"})
            assert missing.status_code == 404 and "NOT_FOUND" in missing.text


@pytest.mark.slow
@run_async
async def test_search_and_pages_are_right_over_10000_groups(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", flush="async") as server:
        names = [f"group-{i:05d}" for i in range(10_000)]
        for start in range(0, len(names), 500):
            await asyncio.gather(
                *(server.broker.create_group(n) for n in names[start : start + 500])
            )
        async with browser(server) as client:
            first = await client.get("/groups")
            assert "10000 of 10000 groups" in first.text and "page 1 of 200" in first.text
            assert _rows(first.text) == names[:50]
            assert _cells(first.text, names[0])[4:8] == ["0", "0", "0", "0"]  # lag read per row
            last = await client.get("/groups", params={"page": "200"})
            assert _rows(last.text) == names[-50:]
            found = await client.get("/groups", params={"q": "GROUP-0042"})
            assert _rows(found.text) == [n for n in names if "group-0042" in n]
            assert "10 of 10000 groups" in found.text
            fragment = await client.get(
                "/groups", params={"q": "-09", "page": "2"}, headers={"hx-request": "true"}
            )
            assert "<html" not in fragment.text
            assert _rows(fragment.text) == [n for n in names if "-09" in n][50:100]


@run_async
async def test_a_groups_page_shows_pop_lag_and_its_settings_change_as_the_user(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        await server.broker.create_topic("orders", 1)
        from popmq.sdk import Credentials

        credentials = Credentials(ROOT_KEY, ROOT_SECRET)
        async with AsyncProducer(server.address, credentials=credentials) as producer:
            for i in range(5):
                await producer.send("orders", b"m%d" % i)
        async with AsyncSimpleConsumer(
            server.address, group="billing", topic="orders", credentials=credentials
        ) as consumer:
            got = await consumer.receive(max_messages=2, invisible_duration_s=60, wait_s=5)
            assert len(got) == 2  # both stay in flight
            async with browser(server) as client:
                await log_in(client, ROOT_KEY, ROOT_SECRET)
                listing = (await client.get("/groups")).text
                assert _rows(listing) == ["billing"]
                # unacked, in flight, retry backlog, dead letters
                assert _cells(listing, "billing")[4:8] == ["5", "2", "0", "0"]
                page = await client.get("/groups/view", params={"name": "billing"})
                assert page.status_code == 200
                assert _cells(page.text, "orders")[:4] == ["orders", "5", "2", "0"]
                # Queue 0: consumer offset 0 (nothing acked), max 5, 3 ready, 2 in flight.
                assert _cells(page.text, "orders/0")[:6] == ["orders", "0", "0", "5", "3", "2"]
                assert 'id="dlq-depth">0<' in page.text
                assert 'hx-trigger="every 2s"' in page.text  # the lag section polls itself
                fragment = await client.get(
                    "/groups/view",
                    params={"name": "billing", "part": "lag"},
                    headers={"hx-request": "true"},
                )
                assert "<html" not in fragment.text
                assert _cells(fragment.text, "orders")[:4] == ["orders", "5", "2", "0"]
                bad_part = await client.get(
                    "/groups/view", params={"name": "billing", "part": "all"}
                )
                assert bad_part.status_code == 400
                assert (
                    'id="update-group"' in page.text and "/groups/delete?name=billing" in page.text
                )

                updated = await client.post(
                    "/groups/update",
                    data={
                        "csrf": csrf_of(page.text),
                        "name": "billing",
                        "max_delivery_attempts": "3",
                        "retry_backoff": "2 4.5",
                        "fifo_shown": "1",
                    },
                )
                assert updated.status_code == 303
                after = (await client.get(updated.headers["location"])).text
                assert "updated group billing" in after and "at most 3 deliveries" in after
                assert "Retry backoff (s): 2 4.5" in after
                assert server.broker.get_group("billing").max_delivery_attempts == 3
                bad = await client.post(
                    "/groups/update",
                    data={"csrf": csrf_of(page.text), "name": "billing", "retry_backoff": "0.5"},
                )
                assert bad.status_code == 400 and "is out of range: 1..43200" in bad.text
                settings = {"csrf": csrf_of(page.text), "name": "billing"}
                subscribed = await client.post(
                    "/groups/update",
                    data={
                        **settings,
                        "subscribe": "orders",
                        "filter_type": "tag",
                        "expression": "TagA || TagB",
                        "consume_from": "last",
                    },
                )
                assert subscribed.status_code == 303
                after = (await client.get(subscribed.headers["location"])).text
                assert "<small>(TagA || TagB)</small>" in after
                assert "starts at the last offset" in after
                assert server.broker.subscription_filter("billing", "orders") == (
                    "tag",
                    "TagA || TagB",
                )
                bad_sql = await client.post(
                    "/groups/update",
                    data={
                        **settings,
                        "subscribe": "orders",
                        "filter_type": "sql",
                        "expression": "a =",
                    },
                )
                assert bad_sql.status_code == 400
                no_time = await client.post(
                    "/groups/update", data={**settings, "consume_from": "timestamp"}
                )
                assert no_time.status_code == 400 and "needs the time" in no_time.text
                removed = await client.post("/groups/update", data={**settings, "remove": "orders"})
                assert removed.status_code == 303
                assert server.broker.subscription_filter("billing", "orders") is None
    assert [(e["event"], e["user"], e["result"]) for e in audit_lines.lines] == [
        ("group.update", "root", "ok"),
        ("group.update", "root", "ok"),
        ("group.update", "root", "INVALID_ARGUMENT"),
        ("group.update", "root", "ok"),
    ]


@run_async
async def test_an_offset_reset_warns_with_what_is_in_flight_and_forces_only_with_the_name(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        async with AsyncProducer(server.address) as producer:
            for i in range(4):
                await producer.send("orders", b"m%d" % i)
        async with AsyncSimpleConsumer(server.address, group="g", topic="orders") as consumer:
            held = await consumer.receive(max_messages=1, invisible_duration_s=60, wait_s=5)
            assert len(held) == 1
            async with browser(server) as client:
                form = await client.get("/groups/reset", params={"name": "g", "topic": "orders"})
                assert "The group has 1 message of orders in flight now" in form.text
                token = csrf_of(form.text)
                fields = {"csrf": token, "name": "g", "topic": "orders", "target": "latest"}
                refused = await client.post("/groups/reset", data=fields)
                assert refused.status_code == 409 and "in flight" in refused.text
                untyped = await client.post("/groups/reset", data={**fields, "force": "on"})
                assert untyped.status_code == 400 and "type the group&#39;s name" in untyped.text
                bad_time = await client.post(
                    "/groups/reset",
                    data={**fields, "target": "timestamp", "timestamp": "yesterday"},
                )
                assert bad_time.status_code == 400 and "is not a time" in bad_time.text
                forced = await client.post(
                    "/groups/reset", data={**fields, "force": "on", "confirm": "g"}
                )
                assert forced.status_code == 303
                done = (await client.get(forced.headers["location"])).text
                assert "queue 0 0→4" in done and "1 deliveries in flight dropped" in done
                assert _cells(done, "orders")[:3] == ["orders", "0", "0"]
    assert [(e["event"], e["result"]) for e in audit_lines.lines] == [
        ("offsets.reset", "FAILED_PRECONDITION"),
        ("offsets.reset", "ok"),
    ]


@run_async
async def test_dead_letters_are_peeked_without_consuming_and_redriven_oldest_first_or_all(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("g", max_delivery_attempts=1)
        async with AsyncProducer(server.address) as producer:
            for i in range(3):
                await producer.send("orders", b"dead %d" % i, keys=[f"k{i}"])
        async with AsyncSimpleConsumer(server.address, group="g", topic="orders") as consumer:
            got = await consumer.receive(max_messages=3, wait_s=5)
            assert len(got) == 3
            for message in got:
                await consumer.nack(message)  # the only attempt: dead-lettered
        await _dead_letters(server, "g", 3)
        async with browser(server) as client:
            group_page = (await client.get("/groups/view", params={"name": "g"})).text
            assert 'id="dlq-depth">3<' in group_page and 'id="dlq-link"' in group_page
            for _ in range(2):  # peeking twice changes nothing
                dlq = await client.get("/groups/dlq", params={"name": "g"})
                assert dlq.status_code == 200
                assert "3 stored in <code>%DLQ%g</code>" in dlq.text
                ids = _MESSAGE_ROW.findall(dlq.text)
                assert len(ids) == 3
            assert "Redrive the 2 oldest" in dlq.text
            token = csrf_of(dlq.text)
            message_page = await client.get(
                "/messages/view", params={"topic": "%DLQ%g", "queue": "0", "offset": "0"}
            )
            assert "dead 0" in message_page.text and "First sent to" in message_page.text

            stale = await client.post(
                "/groups/redrive", data={"csrf": token, "name": "g", "count": "1", "head": "X"}
            )
            assert stale.status_code == 409 and "nothing was redriven" in stale.text
            one = await client.post(
                "/groups/redrive", data={"csrf": token, "name": "g", "count": "1", "head": ids[0]}
            )
            assert one.status_code == 303
            assert (
                "redrove 1 dead letters of group g; 2 remain"
                in (await client.get(one.headers["location"])).text
            )
            untyped = await client.post(
                "/groups/redrive", data={"csrf": token, "name": "g", "all": "1", "confirm": "G"}
            )
            assert untyped.status_code == 400 and "type the group&#39;s name" in untyped.text
            every = await client.post(
                "/groups/redrive", data={"csrf": token, "name": "g", "all": "1", "confirm": "g"}
            )
            assert every.status_code == 303
            assert (
                "redrove 2 dead letters of group g; 0 remain"
                in (await client.get(every.headers["location"])).text
            )
        (_, queues, _) = await server.broker.describe_topic("orders")
        assert sum(q.max_offset - q.min_offset for q in queues) == 6  # 3 sent + 3 redriven
    assert [(e["event"], e["result"]) for e in audit_lines.lines] == [
        ("dlq.redrive", "ok"),
        ("dlq.redrive", "ok"),
    ]
    assert audit_lines.lines[0]["request"]["max_messages"] == "1"


@run_async
async def test_ticked_dead_letters_are_redriven_and_those_gone_meanwhile_are_named(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("g", max_delivery_attempts=1)
        async with AsyncProducer(server.address) as producer:
            for i in range(4):
                await producer.send("orders", b"dead %d" % i)
        async with AsyncSimpleConsumer(server.address, group="g", topic="orders") as consumer:
            got = await consumer.receive(max_messages=4, wait_s=5)
            assert len(got) == 4
            for message in got:
                await consumer.nack(message)
        await _dead_letters(server, "g", 4)
        async with browser(server) as client:
            dlq = await client.get("/groups/dlq", params={"name": "g"})
            for offset in range(4):
                assert f'name="pick" value="0:{offset}" form="redrive-selected-form"' in dlq.text
            token = csrf_of(dlq.text)
            form = {"csrf": token, "name": "g", "selected": "1"}
            no_csrf = await client.post(
                "/groups/redrive", data={"name": "g", "selected": "1", "pick": ["0:1"]}
            )
            assert no_csrf.status_code == 403
            none = await client.post("/groups/redrive", data=form)
            assert none.status_code == 400 and "select at least one" in none.text
            picked = await client.post("/groups/redrive", data={**form, "pick": ["0:1", "0:3"]})
            assert picked.status_code == 303
            assert (
                "redrove 2 of 2 selected dead letters of group g"
                in (await client.get(picked.headers["location"])).text
            )
            left = await server.broker.peek("%DLQ%g", queue_id=0, offset=0, max_messages=8)
            assert [m.offset for m in left] == [0, 2]
            again = await client.post("/groups/redrive", data={**form, "pick": ["0:3", "0:2"]})
            assert again.status_code == 409
            assert "redrove 1 of 2 selected" in again.text
            assert "1 no longer stored" in again.text and "queue 0 offset 3" in again.text
            bad = await client.post("/groups/redrive", data={**form, "pick": ["0:x"]})
            assert bad.status_code == 400 and "is not QUEUE:OFFSET" in bad.text
        back = await server.broker.peek("orders", queue_id=0, offset=4, max_messages=8)
        assert sorted(m.record.body for m in back) == [b"dead 1", b"dead 2", b"dead 3"]
    assert [(e["event"], e["result"]) for e in audit_lines.lines] == [
        ("dlq.redrive", "ok"),
        ("dlq.redrive", "ok"),
    ]


@run_async
async def test_a_group_is_created_with_a_filter_and_an_exponential_or_listed_backoff(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as server:
        broker = server.broker
        await broker.create_topic("orders", 1)
        await broker.create_topic("refunds", 1)
        async with browser(server) as client:
            listing = (await client.get("/groups")).text
            for field in ('name="filter_type"', 'name="expression"', 'value="exponential"'):
                assert field in listing
            form = {"csrf": csrf_of(listing), "topics": "orders refunds"}
            sql = {"filter_type": "sql", "expression": "amount > 5 AND region = 'eu'"}
            exponential = {
                "backoff": "exponential",
                "backoff_initial_s": "2",
                "backoff_multiplier": "3",
                "backoff_max_s": "60",
            }
            made = await client.post("/groups", data={**form, **sql, **exponential, "name": "a"})
            assert made.status_code == 303
            settings = broker.group_settings("a")
            assert [(s.topic, s.filter_type, s.expression) for s in settings.subscriptions] == [
                ("orders", "sql", "amount > 5 AND region = 'eu'"),
                ("refunds", "sql", "amount > 5 AND region = 'eu'"),
            ]
            assert settings.exponential_backoff is not None
            assert (
                settings.exponential_backoff.initial_s,
                settings.exponential_backoff.multiplier,
                settings.exponential_backoff.max_s,
            ) == (2.0, 3.0, 60.0)
            page = (await client.get(made.headers["location"])).text
            assert "amount &gt; 5 AND region = &#39;eu&#39;" in page

            tags = {"filter_type": "tag", "expression": "paid || late"}
            listed = {"backoff": "list", "retry_backoff": "2 4s 8"}
            made = await client.post(
                "/groups", data={**form, **tags, **listed, "name": "b", "topics": "orders"}
            )
            assert made.status_code == 303
            (sub,) = broker.group_settings("b").subscriptions
            assert (sub.filter_type, sub.expression) == ("tag", "paid || late")
            assert broker.get_group("b").retry_backoff_ms == (2000, 4000, 8000)

            # Refused as the API refuses them (its messages), and nothing is created.
            for fields, says in [
                ({"filter_type": "sql", "expression": "amount >"}, "expression"),
                ({**exponential, "backoff_initial_s": "0.5"}, "initial"),
                ({**exponential, "backoff_multiplier": "11"}, "multiplier"),
                ({**exponential, "backoff_max_s": "x"}, "backoff_max_s &#39;x&#39; is not"),
                ({"backoff": "list", "retry_backoff": ""}, "at least one delay"),
                ({"backoff": "list", "retry_backoff": "0.5"}, "out of range"),
                ({"expression": "x", "topics": ""}, "a filter needs a topic"),
            ]:
                refused = await client.post("/groups", data={**form, **fields, "name": "c"})
                assert refused.status_code == 400, (fields, refused.text)
                assert says in refused.text, (fields, says)
            assert sorted(g.name for g in await broker.list_groups()) == ["a", "b"]


@run_async
async def test_a_group_is_deleted_only_with_its_typed_name(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_group("doomed")
        async with browser(server) as client:
            form = await client.get("/groups/delete", params={"name": "doomed"})
            token = csrf_of(form.text)
            mistyped = await client.post(
                "/groups/delete", data={"csrf": token, "name": "doomed", "confirm": "doome"}
            )
            assert mistyped.status_code == 400 and "type the group&#39;s name" in mistyped.text
            assert [g.name for g in await server.broker.list_groups()] == ["doomed"]
            no_csrf = await client.post(
                "/groups/delete", data={"name": "doomed", "confirm": "doomed"}
            )
            assert no_csrf.status_code == 403
            deleted = await client.post(
                "/groups/delete", data={"csrf": token, "name": "doomed", "confirm": "doomed"}
            )
            assert deleted.status_code == 303
            assert await server.broker.list_groups() == []


@run_async
async def test_a_normal_user_sees_only_what_its_policies_allow_on_groups(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None
        await server.broker.create_group("mine")
        await server.broker.create_group("theirs")
        await store.create_user("app", APP_SECRET)
        await store.grant(
            "app", Policy(ResourceType.GROUP, Pattern.ANY, "", frozenset({Action.LIST}))
        )
        await store.grant(
            "app", Policy(ResourceType.GROUP, Pattern.LITERAL, "mine", frozenset({Action.GET}))
        )
        async with browser(server) as client:
            await log_in(client, "app", APP_SECRET)
            listing = (await client.get("/groups")).text
            assert _rows(listing) == ["mine", "theirs"]
            assert 'id="create-group"' not in listing  # no policy allows CREATE on a group
            assert _cells(listing, "mine")[4] == "0"  # lag shown where GET is allowed
            assert "not shown" in " ".join(_cells(listing, "theirs"))
            page = (await client.get("/groups/view", params={"name": "mine"})).text
            for offered in ('id="update-group"', "/groups/delete?", 'id="dlq-link"'):
                assert offered not in page
            other = await client.get("/groups/view", params={"name": "theirs"})
            assert other.status_code == 403 and "may not GET group" in other.text
            token = csrf_of(page)
            delete = await client.post(
                "/groups/delete", data={"csrf": token, "name": "mine", "confirm": "mine"}
            )
            assert delete.status_code == 403
            redrive = await client.post(
                "/groups/redrive",
                data={"csrf": token, "name": "mine", "all": "1", "confirm": "mine"},
            )
            assert redrive.status_code == 403
        assert sorted(g.name for g in await server.broker.list_groups()) == ["mine", "theirs"]
    assert [(e["event"], e["result"]) for e in audit_lines.lines] == [
        ("group.delete", "PERMISSION_DENIED"),
        ("dlq.redrive", "PERMISSION_DENIED"),
    ]


@run_async
async def test_a_group_is_created_with_its_subscriptions_as_the_user(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        async with browser(server) as client:
            listing = (await client.get("/groups")).text
            assert 'id="create-group"' in listing
            token = csrf_of(listing)
            form = {"csrf": token, "name": "billing", "topics": "orders", "fifo": "on"}
            bad = await client.post("/groups", data={**form, "max_delivery_attempts": "0"})
            assert bad.status_code == 400 and "out of range: 1..1000" in bad.text
            twice = await client.post("/groups", data={**form, "topics": "orders orders"})
            assert twice.status_code == 400 and "named twice" in twice.text
            created = await client.post("/groups", data={**form, "max_delivery_attempts": "5"})
            assert created.status_code == 303
            page = (await client.get(created.headers["location"])).text
            assert "created group billing" in page and "FIFO · at most 5 deliveries" in page
            assert 'href="/topics/view?name=orders">orders</a>' in page
            again = await client.post("/groups", data=form)
            assert again.status_code == 409
            missing = await client.post("/groups", data={**form, "name": "x", "topics": "nope"})
            assert missing.status_code == 404
    assert [(e["event"], e["result"]) for e in audit_lines.lines] == [
        ("group.create", "ok"),
        ("group.create", "ALREADY_EXISTS"),
        ("group.create", "NOT_FOUND"),
    ]
