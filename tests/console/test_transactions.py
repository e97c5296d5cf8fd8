"""The transactions page: open half messages listed with their checks, committed or rolled
back as an operator (a rollback only with the topic's name typed), resume refused for an
open one, each through the admin path with its audit line; bad input refused."""

from __future__ import annotations

from pathlib import Path

from popmq.broker_core import NewMessage
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import (
    AUTHENTICATED,
    AuditLines,
    browser,
    csrf_of,
    log_in,
    serving,
)
from tests.console.test_topics import APP_SECRET
from tests.support.run_async import run_async


@run_async
async def test_open_transactions_are_committed_or_rolled_back_by_an_operator(
    tmp_path: Path, audit_lines: AuditLines
) -> None:
    async with serving(tmp_path / "data") as server:
        broker = server.broker
        await broker.create_topic("pay", 1, message_type="transaction")
        kept, dropped = await broker.send_half(  # type: ignore[attr-defined]
            [NewMessage("pay", b"kept"), NewMessage("pay", b"dropped")],
            producer_group="pg",
            check_first_s=3600,
        )
        async with browser(server) as client:
            listing = await client.get("/transactions")
            assert listing.status_code == 200
            for half in (kept, dropped):
                assert f'<tr data-transaction="{half.transaction_id}">' in listing.text
            assert "Commit or roll back…" in listing.text
            page = await client.get(
                "/transactions/resolve", params={"id": kept.transaction_id, "topic": "pay"}
            )
            token = csrf_of(page.text)
            committed = await client.post(
                "/transactions/resolve",
                data={
                    "csrf": token,
                    "id": kept.transaction_id,
                    "topic": "pay",
                    "resolution": "commit",
                },
            )
            assert committed.status_code == 303
            after = (await client.get(committed.headers["location"])).text
            assert f"transaction {kept.transaction_id} of pay: committed" in after
            rollback = {
                "csrf": token,
                "id": dropped.transaction_id,
                "topic": "pay",
                "resolution": "rollback",
            }
            untyped = await client.post("/transactions/resolve", data=rollback)
            assert untyped.status_code == 400 and "type the topic&#39;s name" in untyped.text
            rolled = await client.post("/transactions/resolve", data={**rollback, "confirm": "pay"})
            assert rolled.status_code == 303
            assert "No open transactions." in (await client.get("/transactions")).text
            resumed = await client.post(
                "/transactions/resume",
                data={"csrf": token, "id": kept.transaction_id, "topic": "pay"},
            )
            assert resumed.status_code == 409 and "FAILED_PRECONDITION" in resumed.text
            for params, says in [
                ({"state": "closed"}, "state &#39;closed&#39; is not one of open, discarded"),
                ({"limit": "0"}, "limit 0 is out of range: 1..1000"),
            ]:
                answer = await client.get("/transactions", params=params)
                assert answer.status_code == 400 and says in answer.text
        (_, queues, _) = await broker.describe_topic("pay")
        assert sum(q.max_offset for q in queues) == 1  # only the committed one was stored
    assert [(e["event"], e["result"]) for e in audit_lines.lines] == [
        ("transaction.resolve", "ok"),
        ("transaction.resolve", "ok"),
        ("transaction.resume", "FAILED_PRECONDITION"),
    ]


@run_async
async def test_a_normal_user_without_update_is_not_offered_resolve(tmp_path: Path) -> None:
    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        store = server.security_store
        assert store is not None
        await server.broker.create_topic("pay", 1, message_type="transaction")
        (half,) = await server.broker.send_half(  # type: ignore[attr-defined]
            [NewMessage("pay", b"x")], check_first_s=3600
        )
        await store.create_user("app", APP_SECRET)
        await store.grant(
            "app", Policy(ResourceType.TOPIC, Pattern.ANY, "", frozenset({Action.LIST}))
        )
        async with browser(server) as client:
            await log_in(client, "app", APP_SECRET)
            listing = (await client.get("/transactions")).text
            assert f'<tr data-transaction="{half.transaction_id}">' in listing
            assert "Commit or roll back" not in listing
            refused = await client.post(
                "/transactions/resolve",
                data={
                    "csrf": csrf_of(listing),
                    "id": half.transaction_id,
                    "topic": "pay",
                    "resolution": "commit",
                },
            )
            assert refused.status_code == 403 and "may not UPDATE topic" in refused.text
            # Nor is its half message's body shown: that needs SUB on the topic.
            assert 'class="half"' not in listing
            read = await client.get(
                "/transactions/view", params={"id": half.transaction_id, "topic": "pay"}
            )
            assert read.status_code == 403 and "may not SUB topic" in read.text


@run_async
async def test_a_half_message_is_shown_safely_without_changing_its_transaction(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path / "data") as server:
        broker = server.broker
        await broker.create_topic("pay", 1, message_type="transaction")
        json_half, binary_half = await broker.send_half(  # type: ignore[attr-defined]
            [
                NewMessage(
                    "pay",
                    b'{"amount": 7, "note": "<script>alert(1)</script>"}',
                    tag="t1",
                    keys=("order-7",),
                    properties={"who": "<b>ops</b>"},
                ),
                NewMessage("pay", bytes(range(8))),
            ],
            producer_group="pg",
            check_first_s=3600,
        )
        async with browser(server) as client:
            listing = (await client.get("/transactions")).text
            link = (
                f'<a href="/transactions/view?id={json_half.transaction_id}&amp;topic=pay" '
                'class="half">'
            )
            assert link in listing
            page = await client.get(
                "/transactions/view", params={"id": json_half.transaction_id, "topic": "pay"}
            )
            assert page.status_code == 200
            assert '<td id="transaction-state">open</td>' in page.text
            assert "&#34;amount&#34;: 7" in page.text and "JSON" in page.text
            assert "<script>alert" not in page.text and "&lt;script&gt;" in page.text
            assert "&lt;b&gt;ops&lt;/b&gt;" in page.text and "order-7" in page.text
            binary = await client.get(
                "/transactions/view", params={"id": binary_half.transaction_id, "topic": "pay"}
            )
            assert "binary (hex)" in binary.text and "00 01 02 03" in binary.text
            other = await client.get(
                "/transactions/view", params={"id": json_half.transaction_id, "topic": "other"}
            )
            assert other.status_code == 400 and "belongs to topic" in other.text
            missing = await client.get("/transactions/view", params={"topic": "pay"})
            assert missing.status_code == 400 and "id is required" in missing.text
            await broker.end_transaction(json_half.transaction_id, commit=True)  # type: ignore[attr-defined]
            resolved = await client.get(
                "/transactions/view", params={"id": json_half.transaction_id, "topic": "pay"}
            )
            assert resolved.status_code == 409 and "is committed" in resolved.text
        [still] = await broker.list_transactions("open")  # type: ignore[attr-defined]
        assert (still.transaction_id, still.checks) == (binary_half.transaction_id, 0)
