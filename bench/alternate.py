"""Run one bench scenario from two checkouts in turn, round by round: an A/B on one machine.

``python -m bench.alternate --base CHECKOUT --scenario pop-ack [--rounds 2] [--out FILE]``

Each round runs ``python -m bench --scenario S`` first from ``--base`` (a checkout of an
earlier commit, built as it would be: ``python setup.py build_ext --inplace`` for a compiled
build) and then from this checkout, each with its own harness and its own ``src`` on
PYTHONPATH, and prints (or appends to ``--out``) both reports with /proc/loadavg before each.
The peers (Redis, NATS, the grpc echo) run in every run, so compare the popmq ÷ peer ratios
of one round, not absolute rates across rounds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

THIS = Path(__file__).resolve().parents[1]


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _run(checkout: Path, scenario: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(checkout / "src"))
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--scenario", scenario],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.alternate", description=__doc__)
    parser.add_argument("--base", type=Path, required=True, metavar="CHECKOUT")
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, help="append the reports here (default: stdout)")
    args = parser.parse_args(argv)
    sides = {"base": args.base.resolve(), "new": THIS}

    def emit(text: str) -> None:
        if args.out is None:
            print(text, flush=True)
        else:
            with args.out.open("a") as out:
                out.write(text + "\n")

    for round_ in range(1, args.rounds + 1):
        for side, checkout in sides.items():
            emit(f"### round {round_} {side} load: {_load()}")
            emit(_run(checkout, args.scenario))
    emit(f"### end load: {_load()}")


if __name__ == "__main__":
    main()
