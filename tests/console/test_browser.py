"""The console in a real browser: Playwright driving Debian's headless Chromium
(tools/install_browser.sh; never `playwright install`, which downloads a browser this
machine cannot reach). Log in, watch the overview's chart move after sends, create a topic
from the topics page; send a test message, find it by key and read its body; see a group's
dead letter, read its delivery history, read it and redrive it (ticked); see a NORMAL user
offered only what it may do and refused the rest; watch a group's lag rise and fall on its page as
a consumer acks, and its runtime section show a receive held in a long poll and the
messages in flight with their deadlines, by itself; with no script error and no CSP
violation on the way.

Skips, saying so, only when the Chromium binary is not installed. With
POPMQ_CONSOLE_SCREENSHOTS=DIR it saves the overview, topics, message and group pages (and
a group's runtime section and a message's history) there
(docs/console.md's pictures come from `POPMQ_CONSOLE_SCREENSHOTS=docs`).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest

from popmq.sdk import AsyncProducer, AsyncSimpleConsumer, Credentials
from popmq.security.model import Action, Pattern, Policy, ResourceType
from tests.console.support import AUTHENTICATED, ROOT_KEY, ROOT_SECRET, serving
from tests.support.run_async import run_async

CHROMIUM = Path("/usr/lib/chromium/chromium-headless-shell")
"""Debian's chromium-headless-shell (/usr/bin/chromium-headless-shell is a wrapper that
does not exec, so the binary itself is launched)."""
FLAGS = [
    "--no-sandbox",  # tests run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these Chromium tries to reach hosts this machine cannot.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"{CHROMIUM} is not installed (make setup runs tools/install_browser.sh, "
        "which installs Debian's chromium-headless-shell)",
    ),
]


@run_async
async def test_log_in_watch_the_chart_move_after_sends_and_create_a_topic(
    tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright, expect

    shots = Path(os.environ.get("POPMQ_CONSOLE_SCREENSHOTS") or tmp_path)

    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        assert server.console is not None
        await server.broker.create_topic("orders", 2)
        problems: list[str] = []
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(
                str(tmp_path / "profile"),  # a fresh user-data-dir
                executable_path=str(CHROMIUM),
                args=FLAGS,
                headless=True,
            )
            try:
                context.set_default_timeout(10_000)
                page = context.pages[0] if context.pages else await context.new_page()
                page.on(
                    "console",
                    lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
                )
                page.on("pageerror", lambda e: problems.append(str(e)))

                await page.goto(server.console.url + "/")
                await expect(page).to_have_url(server.console.url + "/login")
                await page.fill("#access_key", ROOT_KEY)
                await page.fill("#secret_key", ROOT_SECRET)
                await page.click("#login")
                await expect(page).to_have_url(server.console.url + "/")
                await expect(page.locator("#serving")).to_have_text("serving")
                chart = page.locator("#rates-chart")
                await expect(chart.locator("canvas")).to_have_count(1)  # uPlot drew it
                await expect(chart).to_have_attribute("data-max-send", "0")  # ticks, no sends

                credentials = Credentials(ROOT_KEY, ROOT_SECRET)
                async with AsyncProducer(server.address, credentials=credentials) as producer:
                    for i in range(30):
                        await producer.send("orders", b"m%d" % i)
                # The page got a tick whose send rate is above zero, by itself.
                # (A locator assertion: wait_for_function's string predicate needs eval in the
                # page, which the console's CSP refuses.)
                await expect(chart).to_have_attribute(
                    "data-max-send", re.compile(r"^(?!0$)\d"), timeout=15_000
                )
                await expect(page.locator("#now")).to_contain_text("send/s")
                await page.screenshot(path=str(shots / "console-overview.png"))

                await page.click("text=Topics")
                await expect(page.locator("#topic-count")).to_contain_text("1 of 1 topics")
                await page.click("text=Create a topic")  # the form folds away once topics exist
                await page.fill("#new-topic-name", "made-in-a-browser")
                await page.click("#create")
                await expect(page.locator("#notice")).to_have_text(
                    "created topic made-in-a-browser"
                )
                await expect(page.locator('tr[data-topic="made-in-a-browser"]')).to_have_count(1)

                await page.fill("#search", "orders")  # htmx swaps the table as one types
                await expect(page.locator("#topic-count")).to_contain_text("1 of 2 topics matching")
                await expect(page.locator('tr[data-topic="orders"]')).to_have_count(1)
                await page.screenshot(path=str(shots / "console-topics.png"))
            finally:
                await context.close()
        names = sorted(t.name for t in await server.broker.list_topics())
        assert names == ["made-in-a-browser", "orders"]
        assert problems == []  # no script error, no CSP violation


@run_async
async def test_send_find_and_read_a_message_then_redrive_a_dead_letter(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    shots = Path(os.environ.get("POPMQ_CONSOLE_SCREENSHOTS") or tmp_path)

    async with serving(tmp_path / "data", security=AUTHENTICATED) as server:
        assert server.console is not None
        url = server.console.url
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("billing", max_delivery_attempts=1)
        credentials = Credentials(ROOT_KEY, ROOT_SECRET)
        async with AsyncSimpleConsumer(
            server.address, group="billing", topic="orders", credentials=credentials
        ) as consumer:
            async with AsyncProducer(server.address, credentials=credentials) as producer:
                await producer.send("orders", b'{"order": 1, "failed": true}', keys=["o-1"])
            (dead,) = await consumer.receive(max_messages=1, wait_s=5)
            await consumer.nack(dead)  # its only attempt: it becomes a dead letter
        for _ in range(200):
            if (await server.broker.lag_report("billing")).dlq_depth == 1:
                break
            await asyncio.sleep(0.05)
        problems: list[str] = []
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(
                str(tmp_path / "profile"),
                executable_path=str(CHROMIUM),
                args=FLAGS,
                headless=True,
            )
            try:
                context.set_default_timeout(10_000)
                page = context.pages[0] if context.pages else await context.new_page()
                page.on(
                    "console",
                    lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
                )
                page.on("pageerror", lambda e: problems.append(str(e)))
                await page.goto(url + "/login")
                await page.fill("#access_key", ROOT_KEY)
                await page.fill("#secret_key", ROOT_SECRET)
                await page.click("#login")
                await expect(page).to_have_url(url + "/")

                await page.goto(url + "/topics/view?name=orders")
                await page.click("text=Send a test message")
                await page.fill("#send-body", "<b>hello</b> from a browser")
                await page.fill("#send-keys", "k-browser")
                await page.click("#send")
                await expect(page.locator("#body")).to_have_text("<b>hello</b> from a browser")
                await expect(page.locator("#message-keys")).to_have_text("k-browser")

                await page.goto(url + "/topics/view?name=orders")
                await page.fill("#lookup-key", "k-browser")
                await page.click("#find-key")
                await expect(page.locator("#browse-how")).to_contain_text("key k-browser")
                await page.locator("#messages tbody tr a").first.click()
                await expect(page.locator("#body")).to_have_text("<b>hello</b> from a browser")
                await page.screenshot(path=str(shots / "console-message.png"))

                await page.goto(url + "/groups")
                await page.click("text=billing")
                await expect(page.locator("#dlq-depth")).to_have_text("1")
                await page.screenshot(path=str(shots / "console-group.png"))
                # The message's delivery history: its pop, the nack of its only attempt, and
                # its dead letter, whose page the step links to.
                await page.goto(
                    url + f"/messages/view?topic=orders&queue={dead.queue_id}&offset={dead.offset}"
                )
                steps = page.locator("#history tbody tr")
                await expect(steps).to_have_count(4)
                for i, step in enumerate(("stored", "pop", "nack", "dead_letter")):
                    await expect(steps.nth(i)).to_have_attribute("data-step", step)
                await page.select_option("#history-group", "billing")
                await page.click("#history-show")
                await expect(page.locator("#history-group")).to_have_value("billing")
                await expect(steps).to_have_count(4)
                await page.locator("#history-section").screenshot(
                    path=str(shots / "console-message-history.png")
                )
                await steps.nth(3).locator("a.copy").click()
                await expect(page.locator("#body")).to_contain_text('"failed": true')

                await page.goto(url + "/groups/view?name=billing")
                await page.click("#dlq-link")
                await expect(page.locator("#messages tbody tr")).to_have_count(1)
                await page.locator("#messages tbody tr a").first.click()
                await expect(page.locator("#body")).to_contain_text('"failed": true')
                await page.go_back()
                # Ticked in the table, sent by the form below it (the box names the form).
                await page.check('input.pick[value="0:0"]')
                await page.click("#redrive-selected")
                await expect(page.locator("#notice")).to_have_text(
                    "redrove 1 of 1 selected dead letters of group billing"
                )
                await expect(page.locator("#dlq-depth")).to_have_text("0")

                # Redriven, it is stored again with its id: the page of the first copy says
                # its history is now found for the new one, and links to it.
                await page.goto(
                    url + f"/messages/view?topic=orders&queue={dead.queue_id}&offset={dead.offset}"
                )
                await page.click("#history-elsewhere a")
                await expect(page.locator("#history tbody tr")).to_have_count(1)

                # A NORMAL user that may only look at topics: no forms it may not use, and
                # the groups list refused, saying why.
                before = len(problems)
                store = server.security_store
                assert store is not None
                await store.create_user("viewer", "viewer-secret-123")
                for actions in ({Action.LIST}, {Action.GET}):
                    await store.grant(
                        "viewer",
                        Policy(ResourceType.TOPIC, Pattern.ANY, "", frozenset(actions)),
                    )
                await page.click("text=Log out")
                await expect(page.locator("#access_key")).to_be_visible()
                await page.fill("#access_key", "viewer")
                await page.fill("#secret_key", "viewer-secret-123")
                await page.click("#login")
                await page.goto(url + "/topics")
                await expect(page.locator('tr[data-topic="orders"]')).to_have_count(1)
                await expect(page.locator("#create-topic")).to_have_count(0)
                await page.click("text=orders")
                await expect(page.locator("#topic-summary")).to_be_visible()
                for form in ("#send-form", "#browse-form", "#update-topic"):
                    await expect(page.locator(form)).to_have_count(0)
                await page.click("text=Groups")
                await expect(page.locator("#message")).to_contain_text("may not LIST every group")
                await expect(page.locator("text=Users")).to_have_count(0)
            finally:
                await context.close()
        assert (await server.broker.lag_report("billing")).dlq_depth == 0
        assert problems[:before] == []  # no script error, no CSP violation
        # After it, only the refusals' own answers: the logout's login form (401) and the
        # refused groups page (403), which Chromium logs as failed loads.
        assert [
            p for p in problems[before:] if "status of 401" not in p and "status of 403" not in p
        ] == []


@run_async
async def test_a_groups_lag_rises_and_falls_on_its_page_as_a_consumer_acks(
    tmp_path: Path,
) -> None:
    from playwright.async_api import async_playwright, expect

    shots = Path(os.environ.get("POPMQ_CONSOLE_SCREENSHOTS") or tmp_path)

    async with serving(tmp_path / "data") as server:  # authentication off: no login
        assert server.console is not None
        url = server.console.url
        await server.broker.create_topic("orders", 1)
        await server.broker.create_group("billing")
        problems: list[str] = []
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(
                str(tmp_path / "profile"),
                executable_path=str(CHROMIUM),
                args=FLAGS,
                headless=True,
            )
            try:
                context.set_default_timeout(10_000)
                page = context.pages[0] if context.pages else await context.new_page()
                page.on(
                    "console",
                    lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
                )
                page.on("pageerror", lambda e: problems.append(str(e)))
                async with AsyncSimpleConsumer(
                    server.address, group="billing", topic="orders"
                ) as consumer:
                    await consumer.receive(max_messages=1, wait_s=0.1)  # the group reads orders
                    await page.goto(url + "/groups/view?name=billing")
                    unacked = page.locator('#topic-lag tr[data-topic="orders"] td').nth(1)
                    in_flight = page.locator('#topic-lag tr[data-topic="orders"] td').nth(2)
                    await expect(unacked).to_have_text("0")
                    # The runtime section shows a receive parked in a long poll while it is
                    # held, and then not, by itself.
                    await expect(page.locator("#held-none")).to_be_visible()
                    holding = asyncio.ensure_future(consumer.receive(max_messages=1, wait_s=6))
                    held = page.locator('#held-polls tr[data-held^="orders/"] td')
                    await expect(held.last).to_have_text("1")
                    assert await holding == []
                    await expect(page.locator("#held-none")).to_be_visible()
                    async with AsyncProducer(server.address) as producer:
                        for i in range(5):
                            await producer.send("orders", b"m%d" % i)
                    await expect(unacked).to_have_text("5")  # the page polls by itself
                    got = await consumer.receive(max_messages=5, invisible_duration_s=60, wait_s=5)
                    await expect(in_flight).to_have_text(str(len(got)))
                    rows = page.locator("#inflight tbody tr")
                    await expect(rows).to_have_count(len(got))
                    await expect(rows.first.locator("td").last).to_contain_text(
                        re.compile(r"^in \d+ s \(")
                    )
                    await page.locator("#runtime-section").screenshot(
                        path=str(shots / "console-group-runtime.png")
                    )
                    await consumer.ack(got)
                    rest = 5 - len(got)
                    while rest:
                        more = await consumer.receive(max_messages=5, wait_s=5)
                        await consumer.ack(more)
                        rest -= len(more)
                    await expect(unacked).to_have_text("0")
                    await expect(in_flight).to_have_text("0")
                    await expect(page.locator("#inflight-none")).to_be_visible()
            finally:
                await context.close()
        assert problems == []
