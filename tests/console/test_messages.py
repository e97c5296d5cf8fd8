"""Browsing a topic's messages without side effects (by queue and offset, by time), lookup
by id and key, a message's page with its body shown safely, and a test message sent as the
logged-in user through the send path's access check."""

from __future__ import annotations

import asyncio
import json
import re
import time
import zlib
from pathlib import Path

from popmq.console.messages import HEX_LIMIT, TEXT_LIMIT, show_body
from popmq.sdk import AsyncProducer, AsyncSimpleConsumer, Credentials
from popmq.security import audit
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import (
    AUTHENTICATED,
    ROOT_KEY,
    ROOT_SECRET,
    browser,
    csrf_of,
    log_in,
    serving,
)
from tests.console.test_topics import APP_SECRET
from tests.support.run_async import run_async

_ROW = re.compile(r'<tr data-message="([^"]+)">\s*<td>(\d+)</td><td><a href="[^"]*">(\d+)</a>')


def _rows(page: str) -> list[tuple[str, int, int]]:
    """(message id, queue, offset) of each listed message."""
    return [(m, int(q), int(o)) for m, q, o in _ROW.findall(page)]


@run_async
async def test_browsing_by_queue_offset_and_time_consumes_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 2)
        sent = []
        async with AsyncProducer(server.address) as producer:
            for i in range(10):
                sent.append(await producer.send("orders", b"m%d" % i, keys=[f"k{i}"]))
                if i == 4:
                    await asyncio.sleep(0.02)
                    middle_ms = int(time.time() * 1000)
                    await asyncio.sleep(0.02)
        by_queue: dict[int, list[str]] = {}
        for receipt in sent:
            by_queue.setdefault(receipt.queue_id, []).append(receipt.message_id)
        async with browser(server) as client:
            topic_page = (await client.get("/topics/view", params={"name": "orders"})).text
            assert 'id="browse-form"' in topic_page and 'id="send-form"' in topic_page

            everything = await client.get("/topics/browse", params={"name": "orders", "size": "50"})
            assert everything.status_code == 200
            assert sorted(m for m, _, _ in _rows(everything.text)) == sorted(
                r.message_id for r in sent
            )
            queue0 = by_queue[0]
            first_two = await client.get(
                "/topics/browse", params={"name": "orders", "queue": "0", "size": "2"}
            )
            assert [m for m, _, _ in _rows(first_two.text)] == queue0[:2]
            assert "queue 0, from the oldest stored" in first_two.text
            following = re.search(r'<a href="([^"]+)" rel="next"', first_two.text)
            assert following is not None
            rest = await client.get(following[1].replace("&amp;", "&"))
            assert [m for m, _, _ in _rows(rest.text)] == queue0[2:4]
            at_offset = await client.get(
                "/topics/browse", params={"name": "orders", "queue": "0", "offset": "1"}
            )
            assert [o for _, _, o in _rows(at_offset.text)] == list(range(1, len(queue0)))

            later = await client.get(
                "/topics/browse", params={"name": "orders", "at": str(middle_ms), "size": "50"}
            )
            assert sorted(m for m, _, _ in _rows(later.text)) == sorted(
                r.message_id for r in sent[5:]
            )
            iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(middle_ms / 1000 - 3600))
            hour_ago = await client.get("/topics/browse", params={"name": "orders", "at": iso})
            assert len(_rows(hour_ago.text)) == 10

            for params, says in [
                ({"offset": "3"}, "an offset needs a queue"),
                ({"queue": "0", "offset": "-1"}, "offset -1 is out of range"),
                ({"size": "0"}, "size 0 is out of range: 1..256"),
                ({"size": "many"}, "size &#39;many&#39; is not a whole number"),
                ({"at": "tomorrow"}, "at &#39;tomorrow&#39; is not a time"),
                ({"at": "999999999999999"}, "is after the year 9999"),
                ({"queue": "0", "offset": "1", "at": "5"}, "an offset or a time, not both"),
            ]:
                answer = await client.get("/topics/browse", params={"name": "orders", **params})
                assert answer.status_code == 400 and says in answer.text, (params, answer.text)
            bad_queue = await client.get("/topics/browse", params={"name": "orders", "queue": "7"})
            assert bad_queue.status_code == 400

        # Nothing was consumed: a new group still gets all ten, at their first attempt.
        async with AsyncSimpleConsumer(server.address, group="late", topic="orders") as consumer:
            got = []
            while len(got) < 10:
                batch = await consumer.receive(max_messages=10, wait_s=5)
                assert batch
                got += batch
            assert {m.delivery_attempt for m in got} == {1}


@run_async
async def test_lookup_by_id_and_key_and_a_messages_page_shows_its_body_safely(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as server:
        await server.broker.create_topic("orders", 1)
        async with AsyncProducer(server.address) as producer:
            html = await producer.send(
                "orders",
                b"<script>alert(1)</script> caf\xc3\xa9",
                keys=["order-7"],
                tag="t<b>",
                properties={"origin": "<i>shop</i>"},
            )
            as_json = await producer.send("orders", b'{"id":7,"items":[1,2]}', keys=["order-7"])
            binary = await producer.send("orders", bytes(range(256)) * 2)
        async with browser(server) as client:
            found = await client.get("/topics/lookup", params={"name": "orders", "key": "order-7"})
            assert [m for m, _, _ in _rows(found.text)] == [html.message_id, as_json.message_id]
            by_id = await client.get(
                "/topics/lookup", params={"name": "orders", "id": binary.message_id}
            )
            assert _rows(by_id.text) == [(binary.message_id, 0, 2)]
            neither = await client.get("/topics/lookup", params={"name": "orders"})
            assert neither.status_code == 400 and "a message id or a key" in neither.text
            unknown = await client.get("/topics/lookup", params={"name": "orders", "id": "nope"})
            assert unknown.status_code == 404

            def view(offset: int) -> dict[str, str]:
                return {"topic": "orders", "queue": "0", "offset": str(offset)}

            text_page = (await client.get("/messages/view", params=view(0))).text
            assert "&lt;script&gt;alert(1)&lt;/script&gt; café" in text_page
            assert "<script>alert" not in text_page
            assert "&lt;i&gt;shop&lt;/i&gt;" in text_page and "t&lt;b&gt;" in text_page
            assert "31 bytes, text" in text_page
            json_page = (await client.get("/messages/view", params=view(1))).text
            assert "22 bytes, JSON" in json_page
            assert "{\n  &#34;id&#34;: 7,\n  &#34;items&#34;: [\n    1," in json_page
            hex_page = (await client.get("/messages/view", params=view(2))).text
            assert "512 bytes, binary (hex)" in hex_page
            assert (
                "00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  ................"
                in (hex_page)
            )
            missing = await client.get("/messages/view", params=view(3))
            assert missing.status_code == 404 and "has no message at offset 3" in missing.text
            beyond = await client.get("/messages/view", params=view(9))
            assert beyond.status_code == 400 and "offset 9 is outside 0..3" in beyond.text
            bad = await client.get("/messages/view", params={"topic": "orders", "queue": "0"})
            assert bad.status_code == 400 and "offset is required" in bad.text


def test_bodies_are_shown_as_text_json_or_hex_and_cut_when_large() -> None:
    big = show_body(b"x" * (TEXT_LIMIT + 10))
    assert (big.kind, big.size, big.truncated, len(big.text)) == (
        "text",
        TEXT_LIMIT + 10,
        True,
        TEXT_LIMIT,
    )
    blob = show_body(b"\x00\xff" * HEX_LIMIT)
    assert blob.kind == "hex" and blob.truncated and blob.size == 2 * HEX_LIMIT
    assert len(blob.text.splitlines()) == HEX_LIMIT // 16
    packed = show_body(zlib.compress(json.dumps({"a": 1}).encode()), "zlib")
    assert packed.kind == "json" and packed.text == '{\n  "a": 1\n}'
    assert packed.note.startswith("inflated from zlib")
    assert show_body(b"\x1b[31mred", "").kind == "hex"  # control characters are not text
    assert show_body(b"", "").kind == "empty"
    assert show_body(b"12").kind == "text"  # a bare JSON number is shown as the text it is


@run_async
async def test_a_test_message_is_sent_as_the_user_through_the_send_check(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None
        for name in ("mine", "theirs"):
            await server.broker.create_topic(name, 1)
        await store.create_user("app", APP_SECRET)
        for name in ("mine", "theirs"):
            await store.grant(
                "app", Policy(ResourceType.TOPIC, Pattern.LITERAL, name, frozenset({Action.GET}))
            )
        await store.grant(
            "app", Policy(ResourceType.TOPIC, Pattern.LITERAL, "mine", frozenset({Action.PUB}))
        )
        async with browser(server) as client:
            await log_in(client, "app", APP_SECRET)
            mine = (await client.get("/topics/view", params={"name": "mine"})).text
            assert 'id="send-form"' in mine and "Send as app" in mine
            assert 'id="browse-form"' not in mine  # no SUB: no browsing
            theirs = (await client.get("/topics/view", params={"name": "theirs"})).text
            assert 'id="send-form"' not in theirs
            token = csrf_of(mine)
            sent = await client.post(
                "/topics/send",
                data={
                    "csrf": token,
                    "name": "mine",
                    "body": "hello from the console",
                    "tag": "test",
                    "keys": "k1, k2",
                    "properties": "a=1\nb = two",
                },
            )
            assert sent.status_code == 303
            assert sent.headers["location"].startswith("/messages/view?topic=mine&queue=0&offset=0")
            # The user may not SUB, so its message page is refused; root reads it below.
            assert (await client.get(sent.headers["location"])).status_code == 403
            denied_before = audit.denied_count(
                "/popmq.v1.MessagingService/SendMessages", "PERMISSION_DENIED"
            )
            refused = await client.post(
                "/topics/send", data={"csrf": token, "name": "theirs", "body": "no"}
            )
            assert refused.status_code == 403 and "may not PUB topic" in refused.text
            assert (
                audit.denied_count("/popmq.v1.MessagingService/SendMessages", "PERMISSION_DENIED")
                == denied_before + 1
            )
            bad = await client.post(
                "/topics/send", data={"csrf": token, "name": "mine", "properties": "novalue"}
            )
            assert bad.status_code == 400 and "properties line 1 is not KEY=VALUE" in bad.text
            no_csrf = await client.post("/topics/send", data={"name": "mine", "body": "x"})
            assert no_csrf.status_code == 403
        async with browser(server) as root:
            await log_in(root, ROOT_KEY, ROOT_SECRET)
            page = (await root.get(sent.headers["location"])).text
            assert "hello from the console" in page and "k1, k2" in page
            assert "<th>a</th><td>1</td>" in page and "<th>b</th><td>two</td>" in page
        async with AsyncSimpleConsumer(
            server.address, group="g", topic="mine", credentials=Credentials(ROOT_KEY, ROOT_SECRET)
        ) as consumer:
            (got,) = await consumer.receive(max_messages=5, wait_s=5)
            assert got.body == b"hello from the console" and got.tag == "test"
        (_, queues, _) = await server.broker.describe_topic("theirs")
        assert sum(q.max_offset for q in queues) == 0
