"""Many API clients hammering the checkpoint list and detail calls (issue 23, item 8).

Run as ``python -m bench.api_clients URL --clients 50 --timeout 1 --ids 1-200``: each client
is its own ``httpx.AsyncClient`` (its own connection) that sends ``GET /v1/checkpoints`` and
``GET /v1/checkpoints/{id}`` (an id drawn from ``--ids``) in turn, the next as soon as the last
was answered or ``--timeout`` (the whole call) ran out, like a dashboard or a job polling
with a short timeout and no
patience. A 503 that carries ``Retry-After`` is honoured (the client waits that long, at most
``--max-wait`` seconds) unless ``--ignore-retry-after``; a connection error waits 0.1 s. The
clients run in this process, apart from the benchmark's, until SIGTERM or SIGINT; then one
JSON line on stdout counts what they got: ``status_<code>``, ``timeouts``, ``errors``
(connection errors by exception class), ``answered`` and its latency percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import ssl
import sys
import time
from collections import Counter

import httpx

__all__ = ["main", "run_clients"]


def _ids(spec: str) -> list[int]:
    first, _, last = spec.partition("-")
    return list(range(int(first), int(last or first) + 1))


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def _client(
    http: httpx.AsyncClient,
    ids: list[int],
    args: argparse.Namespace,
    stop: asyncio.Event,
    seen: Counter[str],
    took: list[float],
) -> None:
    rng = random.Random()
    paths = ["/v1/checkpoints", ""]
    turn = rng.randrange(2)
    async with http:
        while not stop.is_set():
            turn ^= 1
            path = paths[turn] or f"/v1/checkpoints/{rng.choice(ids)}"
            started = time.monotonic()
            try:
                async with asyncio.timeout(args.timeout):  # the whole call, not each read
                    answer = await http.get(path)
            except (httpx.TimeoutException, TimeoutError):
                seen["timeouts"] += 1
                continue
            except httpx.HTTPError as exc:
                seen[f"errors_{type(exc).__name__}"] += 1
                await asyncio.sleep(0.1)
                continue
            took.append(time.monotonic() - started)
            seen[f"status_{answer.status_code}"] += 1
            wait = answer.headers.get("retry-after")
            if answer.status_code == 503 and wait and not args.ignore_retry_after:
                seen["retry_after_waits"] += 1
                await asyncio.sleep(min(float(wait), args.max_wait))


async def run_clients(args: argparse.Namespace) -> dict[str, object]:
    """Run the clients until SIGTERM or SIGINT; what they got."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    seen: Counter[str] = Counter()
    took: list[float] = []
    ids = _ids(args.ids)
    started = time.monotonic()
    tls = ssl.create_default_context()  # one for all: each client loading the CA bundle took 60 ms
    made = [
        httpx.AsyncClient(base_url=args.url, timeout=args.timeout, verify=tls) for _ in range(args.clients)
    ]
    clients = [asyncio.create_task(_client(http, ids, args, stop, seen, took)) for http in made]
    print("started", file=sys.stderr, flush=True)
    await asyncio.gather(*clients)
    return {
        "clients": args.clients,
        "client_timeout_seconds": args.timeout,
        "retry_after": "ignored" if args.ignore_retry_after else f"honoured (at most {args.max_wait} s)",
        "seconds": round(time.monotonic() - started, 2),
        "answered": len(took),
        "answered_p50_seconds": _percentile(took, 50),
        "answered_p99_seconds": _percentile(took, 99),
        **dict(sorted(seen.items())),
    }


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, run the clients, print what they got."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=1.0)
    parser.add_argument("--ids", default="1-1")
    parser.add_argument("--max-wait", type=float, default=5.0)
    parser.add_argument("--ignore-retry-after", action="store_true")
    result = asyncio.run(run_clients(parser.parse_args(argv)))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
