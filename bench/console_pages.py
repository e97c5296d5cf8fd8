"""How fast the console's topics and groups lists answer with many topics and groups.

``python -m bench.console_pages [--topics 10000] [--groups N] [--rounds 20]``

Starts a real server (embedded broker, flush async: only the setup's creates would wait
on fsync) with its console on 127.0.0.1:0, creates ``--topics`` topics and ``--groups``
groups (as many as topics unless said), and times over HTTP, as a browser asks them
(authentication off, so no login), for each list:

- the first page once, right after the start (the templates compile on first use);
- then ``--rounds`` times each: the first page, the last page, a search matching ten
  names, and the table alone as htmx asks for it when one types in the search box.

A groups page also reads the settings and the lag of each of its 50 rows.

Reported: median and worst milliseconds per request. The console's goal is under 500 ms
with 10,000 topics and 10,000 groups (docs/console.md records a run); nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from popmq.broker_core import BrokerConfig, StoreConfig
from popmq.console import ConsoleConfig
from popmq.proxy.server import PopMQServer
from popmq.runtime.config import ServerConfig

Results = list[tuple[str, list[float]]]


async def _measure(
    topics: int, groups: int, rounds: int, data_dir: Path
) -> tuple[Results, Results]:
    server = PopMQServer(
        ServerConfig(
            listen="127.0.0.1:0",
            broker=BrokerConfig(store=StoreConfig(data_dir=data_dir, flush="async")),
            console=ConsoleConfig(listen="127.0.0.1:0"),
        )
    )
    await server.start()
    try:
        assert server.console is not None
        names = [f"topic-{i:05d}" for i in range(topics)]
        for start in range(0, topics, 500):
            await asyncio.gather(
                *(server.broker.create_topic(n, 1) for n in names[start : start + 500])
            )
        group_names = [f"group-{i:05d}" for i in range(groups)]
        for start in range(0, groups, 500):
            await asyncio.gather(
                *(server.broker.create_group(n) for n in group_names[start : start + 500])
            )
        async with httpx.AsyncClient(base_url=server.console.url) as client:
            return (
                await _time_list(client, "/topics", "topic", topics, rounds),
                await _time_list(client, "/groups", "group", groups, rounds),
            )
    finally:
        await server.stop()


async def _time_list(
    client: httpx.AsyncClient, path: str, prefix: str, count: int, rounds: int
) -> Results:
    last_page = str(max(1, -(-count // 50)))
    requests: list[tuple[str, dict[str, str], dict[str, str]]] = [
        ("first page", {}, {}),
        ("last page", {"page": last_page}, {}),
        ("search (10 match)", {"q": f"{prefix.upper()}-0001"}, {}),
        ("htmx table, search", {"q": f"{prefix}-0001"}, {"hx-request": "true"}),
    ]

    async def timed(params: dict[str, str], headers: dict[str, str]) -> float:
        began = time.perf_counter()
        answer = await client.get(path, params=params, headers=headers)
        elapsed = (time.perf_counter() - began) * 1000
        if answer.status_code != 200:
            raise SystemExit(f"{path} answered {answer.status_code}")
        return elapsed

    results = [("first page, cold", [await timed({}, {})])]
    for label, params, headers in requests:
        results.append((label, [await timed(params, headers) for _ in range(rounds)]))
    return results


def main(topics: int = 10_000, rounds: int = 20, groups: int | None = None) -> str:
    groups = topics if groups is None else groups
    with tempfile.TemporaryDirectory(prefix="popmq-console-bench-") as folder:
        topic_results, group_results = asyncio.run(
            _measure(topics, groups, rounds, Path(folder) / "data")
        )
    lines: list[str] = []
    for what, count, results in (
        ("topics", topics, topic_results),
        ("groups", groups, group_results),
    ):
        if lines:
            lines.append("")
        lines += [
            f"{what} list over {count:,} {what} ({rounds} rounds)",
            "",
            "| request | median ms | worst ms |",
            "|---|---|---|",
        ]
        lines += [
            f"| {label} | {statistics.median(ms):.1f} | {max(ms):.1f} |" for label, ms in results
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=None, help="default: as many as --topics")
    parser.add_argument("--rounds", type=int, default=20)
    arguments = parser.parse_args()
    print(main(arguments.topics, arguments.rounds, arguments.groups))
