"""Latency and throughput of the Python client against a running daemon.

    .venv/bin/python client-py/bench/latency.py --socket /tmp/recalld.sock [-n 10000]

Prints one JSON line per measurement:
- `ping` and `decorate` (a ~2 KB Chat Completions request, `dry_run=True`, one memory):
  N sequential calls through the sync `Client`, p50/p99/mean in µs;
- `ping_async_64`: N pings through `AsyncClient` with 64 in flight, calls/s.
Not a test: numbers depend on the machine and on the build (use `maturin develop --release`
and a release daemon for numbers worth comparing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

import recalld


def chat_request_2kb() -> Dict[str, Any]:
    turns = [
        ("user", "We are moving the pricing page to the new design system. What changes first?"),
        ("assistant", "Start with the table component: swap the grid for the new data table, then the plan cards."),
        ("user", "The checkout team wants the annual toggle to default to yearly billing. Is that fine?"),
        ("assistant", "Yes, if the monthly price stays visible and the saving is shown as a percentage."),
        ("user", "Dana owns checkout; Priya owns the design tokens. Who should review the toggle?"),
        ("assistant", "Both: Dana for the billing logic and Priya for the tokens used by the toggle states."),
        ("user", "Write a short summary of the decisions so far for the channel, three bullet points at most."),
    ]
    messages = [{"role": "system", "content": "You help the web team ship the pricing page. Be brief and concrete."}]
    messages += [{"role": r, "content": c} for r, c in turns]
    req: Dict[str, Any] = {"model": "gpt-4o-mini", "temperature": 0.3, "messages": messages}
    pad = 2048 - len(json.dumps(req))
    if pad > 0:
        messages[-1]["content"] += " Context: " + ("pricing table, plan cards, toggle. " * (pad // 36 + 1))[:pad]
    return req


def percentiles(samples_ns: List[int]) -> Dict[str, float]:
    s = sorted(samples_ns)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] / 1000, 1)

    return {"p50_us": at(0.50), "p99_us": at(0.99), "mean_us": round(statistics.fmean(s) / 1000, 1)}


def sequential(name: str, n: int, fn: Callable[[], Any], extra: Dict[str, Any]) -> None:
    for _ in range(min(200, n)):  # warm up
        fn()
    samples = []
    clock = time.perf_counter_ns
    for _ in range(n):
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    print(json.dumps({"bench": name, "calls": n, **percentiles(samples), **extra}), flush=True)


async def throughput(socket: str, n: int, in_flight: int) -> None:
    async with recalld.AsyncClient.connect(socket) as c:
        await asyncio.gather(*(c.ping({}) for _ in range(min(n, 500))))  # warm up
        remaining = n

        async def worker() -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await c.ping({})

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - t0
    print(
        json.dumps(
            {"bench": f"ping_async_{in_flight}", "calls": n, "in_flight": in_flight,
             "seconds": round(elapsed, 3), "calls_per_s": round(n / elapsed)}
        ),
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--socket", default=None, help="daemon socket (default: $RECALLD_SOCKET, then the default path)")
    ap.add_argument("-n", "--calls", type=int, default=10_000, help="calls per measurement (default 10000)")
    ap.add_argument("--in-flight", type=int, default=64, help="concurrent requests for the async run (default 64)")
    ap.add_argument("--memory", default="bench-latency", help="memory id used by decorate")
    args = ap.parse_args()

    with recalld.Client(args.socket) as c:
        socket = c.socket
        sequential("ping", args.calls, lambda: c.ping({}), {})
        req = chat_request_2kb()
        size = len(json.dumps(req))
        sequential(
            "decorate_dry_run",
            args.calls,
            lambda: c.decorate(args.memory, req, dry_run=True),
            {"request_bytes": size},
        )
    asyncio.run(throughput(socket, args.calls, args.in_flight))
    return 0


if __name__ == "__main__":
    sys.exit(main())
