"""A network's round-trip time between a client and a local server: toxiproxy.

This kernel has no netem, so the delay is added in user space by Shopify's
toxiproxy (scripts/toxiproxy.sh builds and starts it). One proxy listens on a
free port of 127.0.0.1 in front of the server, with two `latency` toxics: half
the round-trip time on the request bytes (upstream) and the other half on the
answer bytes (downstream; an odd RTT puts the extra millisecond there). So
every request/answer exchange pays the whole RTT once, and a long answer pays
it once too: toxiproxy delays each chunk by the latency counted from when that
chunk arrived, so chunks stream back to back (no bandwidth limit is set).
What it does not add is the TCP handshake's round trip: the proxy accepts on
loopback. A client that opens a connection per request (resync-sync) would
pay one RTT more per request on a real network, so its figure here is
optimistic.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harvest import free_port

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "toxiproxy.sh"


def api(port: int, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One call to toxiproxy's HTTP API; its JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method,
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        content = answer.read()
    return json.loads(content) if content else None


def latency_toxic(name: str, stream: str, milliseconds: int) -> dict[str, Any]:
    return {
        "name": name, "type": "latency", "stream": stream, "toxicity": 1.0,
        "attributes": {"latency": milliseconds, "jitter": 0},
    }  # fmt: skip


def script(command: str, port: int) -> None:
    subprocess.run([str(SCRIPT), command], env={**os.environ, "TOXIPROXY_PORT": str(port)},
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip


@contextmanager
def latency_proxy(upstream_port: int, rtt_ms: int) -> Iterator[dict[str, Any]]:
    """A toxiproxy server of its own on a free port, one proxy to `upstream_port` with the RTT.

    Yields the proxy's base URL and what was set up; the server is stopped on exit.
    """
    api_port = free_port()
    script("start", api_port)
    try:
        listen = free_port()
        api(api_port, "POST", "/proxies", {
            "name": "server", "listen": f"127.0.0.1:{listen}",
            "upstream": f"127.0.0.1:{upstream_port}", "enabled": True,
        })  # fmt: skip
        upstream, downstream = rtt_ms // 2, rtt_ms - rtt_ms // 2
        for name, stream, milliseconds in (("request", "upstream", upstream),
                                           ("answer", "downstream", downstream)):  # fmt: skip
            if milliseconds:
                api(api_port, "POST", "/proxies/server/toxics",
                    latency_toxic(name, stream, milliseconds))  # fmt: skip
        binary = subprocess.run([str(SCRIPT), "path"], capture_output=True, text=True, check=True)
        yield {
            "base_url": f"http://127.0.0.1:{listen}",
            "rtt_ms": rtt_ms,
            "toxics": {"upstream_ms": upstream, "downstream_ms": downstream},
            "toxiproxy": Path(binary.stdout.strip()).name,
        }
    finally:
        script("stop", api_port)


def measured_rtt_ms(base_url: str, path: str, requests: int = 5) -> float:
    """Median time of a GET of `path` on one keep-alive connection: what one request costs."""
    import http.client

    host, port = base_url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    times = []
    try:
        for _ in range(requests):
            started = time.perf_counter()
            connection.request("GET", path)
            connection.getresponse().read()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        connection.close()
    return round(statistics.median(times), 2)
