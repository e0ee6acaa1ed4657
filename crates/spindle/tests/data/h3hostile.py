#!/usr/bin/env python3
"""Hostile HTTP/3 clients for spindle's tests (tests/h3_hostile.rs), on
raw UDP sockets and aioquic (PyPI `aioquic`).

    h3hostile.py MODE PORT [options]

Each mode prints `started` (or `stalled ...`) on a line of its own once
its attack is under way, so that the test can probe the server meanwhile,
then one line of JSON with what it saw, and exits by itself.

garbage   random datagrams (a quarter shaped as long-header Initials of
          QUIC v1, whose payload is noise; a few empty), from many source
          ports, spread over --seconds
initials  real Initial packets (aioquic's first flight of a new
          connection) from --count sockets on the addresses --addrs, never
          answered; for each socket: the bytes sent, the bytes received in
          --wait seconds, and the type of the first packet that came back
streams   one aioquic connection sending --count requests at once; with
          --cheat it ignores the server's stream limit (MAX_STREAMS)
headers   a request whose field section passes 16 KiB (the server's
          SETTINGS_MAX_FIELD_SECTION_SIZE) and a small one after it on the
          same connection; then, on a new connection, a HEADERS frame past
          64 KiB (the largest frame the server buffers)
stall     one connection with huge flow-control windows downloading
          --path, that stops reading and acknowledging after --after bytes
          and holds its socket for --hold seconds
"""

import argparse
import asyncio
import json
import os
import random
import selectors
import socket
import ssl
import sys
import time

# h3client.py beside this file, imported without leaving a __pycache__ in
# the source tree.
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from aioquic.asyncio.client import connect  # noqa: E402
from aioquic.h3.connection import H3_ALPN, H3Connection  # noqa: E402
from aioquic.h3.events import DataReceived, HeadersReceived  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.quic.connection import QuicConnection  # noqa: E402
from aioquic.quic.events import ConnectionTerminated  # noqa: E402

from h3client import CA, Client  # noqa: E402

SERVER = "127.0.0.1"


def started(what="started"):
    print(what, flush=True)


def done(out):
    """Prints what the mode saw and exits, leaving no connection to close."""
    print(json.dumps(out), flush=True)
    os._exit(0)


def config(**kw):
    c = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, **kw)
    c.load_verify_locations(cafile=CA)
    c.verify_mode = ssl.CERT_REQUIRED
    c.server_name = "localhost"
    return c


def packet_type(d):
    """A datagram's first packet: initial, 0rtt, handshake, retry, vn
    (version negotiation), short, or empty."""
    if not d:
        return "empty"
    if not d[0] & 0x80:
        return "short"
    if d[1:5] == b"\0\0\0\0":
        return "vn"
    return ["initial", "0rtt", "handshake", "retry"][(d[0] >> 4) & 3]


def udp(addr="127.0.0.1"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind((addr, 0))
    s.setblocking(False)
    return s


def drain(sel, until, on_datagram):
    """Reads every socket of `sel` until `until`."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return
        for key, _ in sel.select(left):
            while True:
                try:
                    d = key.fileobj.recv(65536)
                except BlockingIOError:
                    break
                on_datagram(key.data, d)


def garbage(a):
    rng = random.Random(a.seed)
    socks = [udp() for _ in range(a.sockets)]
    sel = selectors.DefaultSelector()
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
    got = {"replies": 0, "reply_bytes": 0, "types": {}}

    def reply(_i, d):
        got["replies"] += 1
        got["reply_bytes"] += len(d)
        t = packet_type(d)
        got["types"][t] = got["types"].get(t, 0) + 1

    started()
    sent = sent_bytes = 0
    batches = 50
    t0 = time.monotonic()
    for b in range(batches):
        for _ in range(a.count // batches):
            n = rng.randint(1, 1500)
            if sent % 4 == 0:
                # An Initial's long header (QUIC v1, an 8-byte DCID whose
                # first byte steers it), then noise where the protected
                # payload would be: it fails to decrypt.
                n = max(n, 1200)
                d = bytes([0xC0 | rng.randrange(16), 0, 0, 0, 1, 8])
                d += rng.randbytes(n - len(d))
            else:
                d = rng.randbytes(n)
            if sent % 1000 == 0:
                d = b""  # empty datagrams are datagrams too
            socks[sent % len(socks)].sendto(d, (SERVER, a.port))
            sent += 1
            sent_bytes += len(d)
        drain(sel, t0 + a.seconds * (b + 1) / batches, reply)
    drain(sel, time.monotonic() + 0.5, reply)
    return {"sent": sent, "sent_bytes": sent_bytes, **got}


def initials(a):
    addrs = a.addrs.split(",")
    socks = [udp(addrs[i % len(addrs)]) for i in range(a.count)]
    sel = selectors.DefaultSelector()
    per = []
    for i, s in enumerate(socks):
        sel.register(s, selectors.EVENT_READ, i)
        per.append({"addr": addrs[i % len(addrs)], "sent": 0, "received": 0, "first": None})

    def reply(i, d):
        p = per[i]
        p["received"] += len(d)
        if p["first"] is None:
            p["first"] = packet_type(d)

    flights = []
    for _ in socks:
        c = QuicConnection(configuration=config())
        c.connect((SERVER, a.port), now=time.time())
        flights.append([d for d, _ in c.datagrams_to_send(now=time.time())])
    started()
    for i, s in enumerate(socks):
        for d in flights[i]:
            s.sendto(d, (SERVER, a.port))
            per[i]["sent"] += len(d)
    drain(sel, time.monotonic() + a.wait, reply)
    kinds = {}
    for p in per:
        k = p["first"] or "silent"
        kinds[k] = kinds.get(k, 0) + 1
    return {"kinds": kinds, "per": per}


async def streams_async(a):
    async with connect(SERVER, a.port, configuration=config(), create_protocol=Client) as c:
        q = c._quic
        limit = q._remote_max_streams_bidi
        if a.cheat:
            q._remote_max_streams_bidi = 1 << 20
        futs = [c.request("GET", a.path, [], None) for _ in range(a.count)]
        blocked = len(q._streams_blocked_bidi)
        started()
        finished, _ = await asyncio.wait(futs, timeout=a.timeout)
        answered = sum(
            1 for f in finished if not f.exception() and f.result()["status"] == 200
        )
        # Out at once: a connection whose server went silent would hold a
        # graceful close for several PTOs.
        done(
            {
                "server_max_streams": limit,
                "blocked": blocked,
                "answered": answered,
                "terminated": c.terminated,
            }
        )


async def headers_async(a):
    rng = random.Random(a.seed)
    out = {}
    # 20,000 letters: about 12 KB Huffman-coded, in one frame well under
    # 64 KiB, but 20 KB of field section decoded.
    async with connect(SERVER, a.port, configuration=config(), create_protocol=Client) as c:
        big = c.request("GET", a.path, [("x-big", "a" * 20000)], None)
        started()
        out["big"] = await asyncio.wait_for(big, a.timeout)
        out["next"] = await asyncio.wait_for(c.request("GET", a.path, [], None), a.timeout)
    # Two fields of 50,000 random characters: about 70 KB even
    # Huffman-coded, one HEADERS frame past 64 KiB.
    noise = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(50000))
    async with connect(SERVER, a.port, configuration=config(), create_protocol=Client) as c:
        huge = c.request("GET", a.path, [("x-a", noise), ("x-b", noise[::-1])], None)
        try:
            out["huge"] = await asyncio.wait_for(huge, a.timeout)
        except ConnectionError as e:
            out["huge"] = {"closed": e.code}
    for r in out.values():
        r.pop("body", None)
    return out


def headers(a):
    return asyncio.run(headers_async(a))


def streams(a):
    return asyncio.run(streams_async(a))


def stall(a):
    c = QuicConnection(configuration=config(max_data=1 << 30, max_stream_data=1 << 30))
    h3 = H3Connection(c)
    s = udp()
    server = (SERVER, a.port)
    c.connect(server, now=time.time())
    sid = c.get_next_available_stream_id()
    h3.send_headers(
        sid,
        [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", b"localhost"),
            (b":path", a.path.encode()),
        ],
        end_stream=True,
    )
    got, status = 0, None
    deadline = time.monotonic() + a.timeout
    while got < a.after:
        if time.monotonic() > deadline:
            return {"error": f"only {got} bytes in {a.timeout} s"}
        for d, _ in c.datagrams_to_send(now=time.time()):
            s.sendto(d, server)
        timer = c.get_timer()
        wait = 0.05 if timer is None else max(0.0, min(0.05, timer - time.time()))
        sel = selectors.DefaultSelector()
        sel.register(s, selectors.EVENT_READ)
        sel.select(wait)
        sel.close()
        while True:
            try:
                d = s.recv(65536)
            except BlockingIOError:
                break
            c.receive_datagram(d, server, now=time.time())
        timer = c.get_timer()
        if timer is not None and time.time() >= timer:
            c.handle_timer(now=time.time())
        while (e := c.next_event()) is not None:
            if isinstance(e, ConnectionTerminated):
                return {"error": f"closed: {e.error_code:#x} {e.reason_phrase}"}
            for h in h3.handle_event(e):
                if isinstance(h, HeadersReceived):
                    status = dict(h.headers).get(b":status", b"").decode()
                elif isinstance(h, DataReceived):
                    got += len(h.data)
    # From here on nothing is read, nothing acknowledged: the socket stays
    # open (its buffer fills, then the kernel drops what comes).
    started(f"stalled {got}")
    time.sleep(a.hold)
    return {"status": status, "received": got}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["garbage", "initials", "streams", "headers", "stall"])
    p.add_argument("port", type=int)
    p.add_argument("--count", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--sockets", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--addrs", default="127.0.0.1")
    p.add_argument("--wait", type=float, default=3.0)
    p.add_argument("--cheat", action="store_true")
    p.add_argument("--path", default="/f1")
    p.add_argument("--after", type=int, default=8 << 20)
    p.add_argument("--hold", type=float, default=5.0)
    p.add_argument("--timeout", type=float, default=15.0)
    a = p.parse_args()
    modes = {
        "garbage": garbage,
        "initials": initials,
        "streams": streams,
        "headers": headers,
        "stall": stall,
    }
    done(modes[a.mode](a))


if __name__ == "__main__":
    main()
