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
