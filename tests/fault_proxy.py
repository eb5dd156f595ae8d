"""A small HTTP proxy for the object-store tests, between croupier and the store, that injects
the faults a store and its network cause: 503 SlowDown answers, connections reset in the middle of
a body, and answers that stall. Faults hit ranged GETs only (the data reads), each at its own rate,
drawn from a seeded generator; the counts of what was injected are in `injected`. Requests are
forwarded unchanged (the signature covers them), one upstream connection per request."""
import http.client
import random
import socket
import struct
import threading
import time

SLOW_DOWN = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code>"
             b"<Message>Please reduce your request rate.</Message></Error>")


class FaultProxy:
    def __init__(self, upstream_port, slow_down=0.0, reset=0.0, stall=0.0, stall_seconds=2.0,
                 seed=0):
        self.upstream_port = upstream_port
        self.rates = {"slow_down": slow_down, "reset": reset, "stall": stall}
        self.stall_seconds = stall_seconds
        self.injected = {"slow_down": 0, "reset": 0, "stall": 0, "forwarded": 0}
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self._stopped.set()
        self._listener.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _draw(self):
        with self._lock:
            x = self._rng.random()
            for kind, rate in self.rates.items():
                if x < rate:
                    self.injected[kind] += 1
                    return kind
                x -= rate
            self.injected["forwarded"] += 1
            return None

    def _accept(self):
        while not self._stopped.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        reader = conn.makefile("rb")
        try:
            while not self._stopped.is_set():
                request_line = reader.readline()
                if not request_line:
                    return
                headers = []
                while True:
                    line = reader.readline()
                    if line in (b"\r\n", b"\n", b""):
                        break
                    name, _, value = line.decode("latin-1").partition(":")
                    headers.append((name.strip(), value.strip()))
                length = int(next((v for n, v in headers if n.lower() == "content-length"), 0))
                body = reader.read(length) if length else b""
                ranged = any(n.lower() == "range" for n, _ in headers)
                fault = self._draw() if request_line.startswith(b"GET ") and ranged else None
                if fault == "slow_down":
                    conn.sendall(b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                                 b"Content-Length: %d\r\n\r\n" % len(SLOW_DOWN) + SLOW_DOWN)
                    continue
                status, reason, out_headers, out_body = self._forward(request_line, headers, body)
                head = f"HTTP/1.1 {status} {reason}\r\n"
                is_head = request_line.startswith(b"HEAD ")
                for name, value in out_headers:
                    # A HEAD's Content-Length is the object's size: it stays.
                    if name.lower() in ("transfer-encoding", "connection") or (
                            name.lower() == "content-length" and not is_head):
                        continue
                    head += f"{name}: {value}\r\n"
                if not is_head:
                    head += f"Content-Length: {len(out_body)}"
                    head += "\r\n"
                head += "\r\n"
                if fault == "stall":
                    time.sleep(self.stall_seconds)  # longer than the client's read timeout
                    return
                if fault == "reset":
                    conn.sendall(head.encode("latin-1") + out_body[:len(out_body) // 2])
                    # SO_LINGER 0: close() sends a RST, as a dropped connection does.
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return
                conn.sendall(head.encode("latin-1") + out_body)
        except OSError:
            return
        finally:
            reader.close()
            conn.close()

    def _forward(self, request_line, headers, body):
        method, target, _ = request_line.decode("latin-1").split(" ", 2)
        upstream = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=30)
        try:
            upstream.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() != "connection":
                    upstream.putheader(name, value)
            upstream.putheader("Connection", "close")
            upstream.endheaders(body or None)
            resp = upstream.getresponse()
            data = resp.read()
            return resp.status, resp.reason, resp.getheaders(), data
        finally:
            upstream.close()
