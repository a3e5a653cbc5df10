"""A separate process that sends pre-signed Slack requests over HTTP and times each response.

``python -m bench.ack_client URL FILE`` reads ``[{"body": ..., "headers": {...}}, ...]`` from
FILE, posts them one after another (5 ms apart) and prints the latencies in ms as JSON. Being
another process, it sees what Slack would: time spent waiting for a busy event loop included.
"""

from __future__ import annotations

import http.client
import json
import sys
import time
from urllib.parse import urlsplit


def main() -> None:
    url, path = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as handle:
        requests = json.load(handle)
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    latencies: list[float] = []
    statuses: list[int] = []
    for request in requests:
        started = time.perf_counter()
        connection.request(
            "POST", parts.path, body=request["body"].encode(), headers=request["headers"]
        )
        response = connection.getresponse()
        response.read()
        latencies.append((time.perf_counter() - started) * 1000)
        statuses.append(response.status)
        time.sleep(0.005)
    connection.close()
    print(json.dumps({"latencies_ms": latencies, "statuses": statuses}))


if __name__ == "__main__":
    main()
