#!/usr/bin/env python3
"""An HTTP/3 client for spindle's tests, on aioquic (PyPI `aioquic`).

    h3client.py PORT [--out DIR] [--timeout S] < requests.json

Connects to 127.0.0.1:PORT (server name `localhost`, verified against the
test CA, tests/data/tls/ca.pem), sends every request of the JSON list on
stdin at once, each on a stream of its own over the one connection, and
prints one JSON object:

    {"retried": bool,            # the server sent a Retry first
     "max_streams_bidi": n,      # the server's request stream limit
     "results": [{"status": 200, "headers": [[name, value], ...],
                  "length": n, "sha256": hex,
                  "reset": code or null}, ...]}   # in the requests' order

A request is {"method": "GET", "path": "/f1", "headers": [[n, v], ...],
"body": "text"} (all but "path" optional). With --out, the body of the
i-th request is written to DIR/i. A connection closed before every
response came is printed as {"closed": code, "reason": text} (the
CONNECTION_CLOSE's error code), exit status 3; a timeout is exit status 1.
"""

import argparse
import asyncio
import hashlib
import json
import os
import ssl
import sys

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

CA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tls", "ca.pem")


class Closed(ConnectionError):
    """The connection closed before a response was whole."""

    def __init__(self, code, reason):
        super().__init__(f"connection closed: {code:#x} {reason}")
        self.code = code
        self.reason = reason


class H3(H3Connection):
    """aioquic's HTTP/3, told which streams answer HEAD: their
    content-length is the GET's, with no DATA (RFC 9110 §9.3.2), which
    aioquic would otherwise take for a truncated body."""

    def __init__(self, quic):
        super().__init__(quic)
        self.head = set()

    def _check_content_length(self, stream):
        if stream.stream_id not in self.head:
            super()._check_content_length(stream)


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3(self._quic)
        self.streams = {}  # stream id -> (result, future)
        self.terminated = None

    def request(self, method, path, headers, body):
        sid = self._quic.get_next_available_stream_id()
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", path.encode()),
        ] + [(n.encode(), v.encode()) for n, v in headers]
        data = body.encode() if body is not None else None
        if method == "HEAD":
            self.h3.head.add(sid)
        self.h3.send_headers(sid, fields, end_stream=data is None)
        if data is not None:
            self.h3.send_data(sid, data, end_stream=True)
        result = {"status": None, "headers": [], "body": bytearray(), "reset": None}
        fut = asyncio.get_running_loop().create_future()
        self.streams[sid] = (result, fut)
        self.transmit()
        return fut

    def quic_event_received(self, event):
        if isinstance(event, StreamReset) and event.stream_id in self.streams:
            result, fut = self.streams[event.stream_id]
            result["reset"] = event.error_code
            if not fut.done():
                fut.set_result(result)
            return
        if isinstance(event, ConnectionTerminated):
            self.terminated = (event.error_code, event.reason_phrase)
            for result, fut in self.streams.values():
                if not fut.done():
                    fut.set_exception(Closed(event.error_code, event.reason_phrase))
        for e in self.h3.handle_event(event):
            entry = self.streams.get(getattr(e, "stream_id", None))
            if entry is None:
                continue
            result, fut = entry
            if isinstance(e, HeadersReceived):
                if result["status"] is None:
                    for n, v in e.headers:
                        if n == b":status":
                            result["status"] = int(v)
                        else:
                            result["headers"].append([n.decode("latin-1"), v.decode("latin-1")])
            elif isinstance(e, DataReceived):
                result["body"] += e.data
            if getattr(e, "stream_ended", False) and not fut.done():
                fut.set_result(result)


async def run(args, requests):
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    config.load_verify_locations(cafile=CA)
    config.verify_mode = ssl.CERT_REQUIRED
    config.server_name = "localhost"
    async with connect(
        "127.0.0.1", args.port, configuration=config, create_protocol=Client
    ) as client:
        futs = [
            client.request(
                r.get("method", "GET"), r["path"], r.get("headers", []), r.get("body")
            )
            for r in requests
        ]
        results = await asyncio.wait_for(
            asyncio.gather(*futs, return_exceptions=True), args.timeout
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r
        quic = client._quic
        out = {
            "retried": quic._retry_count > 0,
            "max_streams_bidi": quic._remote_max_streams_bidi,
            "results": [],
        }
        for i, r in enumerate(results):
            body = bytes(r.pop("body"))
            if args.out:
                with open(os.path.join(args.out, str(i)), "wb") as f:
                    f.write(body)
            r["length"] = len(body)
            r["sha256"] = hashlib.sha256(body).hexdigest()
            out["results"].append(r)
        return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("--out")
    p.add_argument("--timeout", type=float, default=30.0)
    args = p.parse_args()
    requests = json.load(sys.stdin)
    try:
        out = asyncio.run(run(args, requests))
    except Closed as e:
        json.dump({"closed": e.code, "reason": e.reason}, sys.stdout)
        print()
        sys.exit(3)
    except (ConnectionError, asyncio.TimeoutError) as e:
        print(f"h3client: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
