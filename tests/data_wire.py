"""The data plane's handshake on a raw socket, for tests that send frames by hand
(docs/protocol.md "Handshake"): challenge and response, proving the token without sending it."""
import hashlib
import hmac
import os
import struct

VERSION = 3  # frame::kDataProtocolVersion
CHALLENGE, AUTH, HELLO_OK, ERROR = 22, 23, 16, 17


def recv_exactly(s, n):
    data = b""
    while len(data) < n:
        got = s.recv(n - len(data))
        if not got:
            raise EOFError("the data server closed the connection")
        data += got
    return data


def read_frame(s):
    """(type, body) of the next frame."""
    kind, _, n = struct.unpack("<IIQ", recv_exactly(s, 16))
    return kind, recv_exactly(s, n)


def proof(token, label, client_nonce, server_nonce):
    def field(b):
        return struct.pack("<I", len(b)) + b
    return hmac.new(token, field(label) + field(client_nonce) + field(server_nonce),
                    hashlib.sha256).digest()


def handshake(s, token):
    """Completes the handshake proving `token` (str or bytes), without checking the server's
    proof; raises AssertionError unless the server answers HELLO_OK."""
    token = token.encode() if isinstance(token, str) else token
    nonce = os.urandom(32)
    s.sendall(b"CRDP" + struct.pack("<III", VERSION, len(nonce), 0) + nonce)
    kind, body = read_frame(s)
    assert kind == CHALLENGE, f"frame type {kind} in place of CHALLENGE: {body[8:]!r}"
    mine = proof(token, f"croupier data v{VERSION} client".encode(), nonce, body[:32])
    s.sendall(struct.pack("<IIQ", AUTH, 0, len(mine)) + mine)
    kind, body = read_frame(s)
    assert kind == HELLO_OK, f"frame type {kind} in place of HELLO_OK: {body[8:]!r}"


def hello(version=VERSION):
    """A HELLO with a fresh nonce."""
    nonce = os.urandom(32)
    return b"CRDP" + struct.pack("<III", version, len(nonce), 0) + nonce


def flood(host, port, clients, seconds, source_ip="127.0.0.1", stop=lambda: False):
    """`clients` clients without the token that reconnect in a loop to the data server at
    host:port from `source_ip` for `seconds` (or until `stop()`), on one thread: half stay
    silent once connected (until the server closes them), half send a HELLO and an AUTH without
    a proof. Returns
    counts: connections made, connections the server closed before any byte ("dropped": evicted
    or timed out), refusals for the handshake slots ("refused"), and connect errors."""
    import errno
    import selectors
    import socket
    import time

    sel = selectors.DefaultSelector()
    counts = {"connections": 0, "dropped": 0, "refused": 0, "connect_errors": 0}
    linger = struct.pack("ii", 1, 0)  # a reset on close: no TIME_WAIT left on this side

    def start(i):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        s.setblocking(False)
        s.bind((source_ip, 0))
        err = s.connect_ex((host, port))
        if err not in (0, errno.EINPROGRESS):
            counts["connect_errors"] += 1
            s.close()
            return False
        sel.register(s, selectors.EVENT_WRITE, {"i": i, "silent": i % 2 == 0, "in": b"",
                                                "connected": False, "authed": False})
        return True

    def drop(s):
        sel.unregister(s)
        s.close()

    end = time.monotonic() + seconds
    retry = []
    for i in range(clients):
        if not start(i):
            retry.append(i)
    while time.monotonic() < end and not stop():
        for i in retry[:]:
            if start(i):
                retry.remove(i)
        for key, _ in sel.select(timeout=0.05):
            s, c = key.fileobj, key.data
            if not c["connected"]:
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) != 0:
                    counts["connect_errors"] += 1
                    drop(s)
                    retry.append(c["i"])
                    continue
                c["connected"] = True
                counts["connections"] += 1
                if not c["silent"]:
                    try:
                        s.send(hello())
                    except OSError:
                        pass
                sel.modify(s, selectors.EVENT_READ, c)
                continue
            try:
                got = s.recv(65536)
            except OSError:
                got = b""
            if got:
                c["in"] += got
                if len(c["in"]) >= 16:
                    kind, _, n = struct.unpack("<IIQ", c["in"][:16])
                    if kind == ERROR and b"handshake already" in c["in"]:
                        counts["refused"] += 1
                        c["in"] = b"counted"
                    elif kind == CHALLENGE and not c["authed"] and len(c["in"]) >= 16 + n:
                        c["authed"] = True
                        try:
                            s.send(struct.pack("<IIQ", AUTH, 0, 0))  # no proof
                        except OSError:
                            pass
                continue
            if not c["in"]:
                counts["dropped"] += 1
            drop(s)
            if not start(c["i"]):
                retry.append(c["i"])
    for key in list(sel.get_map().values()):
        key.fileobj.close()
    return counts


if __name__ == "__main__":
    # python data_wire.py flood HOST PORT CLIENTS SECONDS [SOURCE_IP]: prints the counts as JSON,
    # after SECONDS or once SIGTERM comes.
    import json
    import signal
    import sys
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    _, _, host, port, clients, seconds, *source = sys.argv
    print(json.dumps(flood(host, int(port), int(clients), float(seconds), *source,
                           stop=lambda: bool(stopped))), flush=True)
