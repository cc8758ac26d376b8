"""A bus tool in Python: the same API as the Rust client (crates/bus/src/client.rs)."""

import socket
import struct
import threading

from . import term as T
from .wire import DEFAULT_MAX_FRAME, VERSION, FrameError, decode_frame, encode_frame


class TransferFailed(RuntimeError):
    """A reference could not be fetched (owner lost, unknown variable, refused)."""


def _connect(location):
    if location.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(location[5:])
    else:
        host, port = location.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame(s, max_frame=DEFAULT_MAX_FRAME):
    """One whole frame (length checked before reading the body), or None at the end."""
    head = _read_exact(s, 4)
    if head is None:
        return None
    n = struct.unpack(">I", head)[0]
    if n == 0 or n > max_frame:
        raise FrameError("TooLarge" if n else "Empty")
    body = _read_exact(s, n)
    if body is None:
        return None
    return head + body


class Tool:
    """connect, next_request, value, event, note, put, resolve, release, close."""

    def __init__(self, bus, name, token="", serve=True, window=4 << 20, chunk=256 * 1024,
                 max_frame=DEFAULT_MAX_FRAME):
        self.max_frame = max_frame
        self.window = window
        self.chunk = chunk
        self.store = {}
        self.lock = threading.Lock()
        self.cache = {}
        self.fetches = 0
        self.next_var = 0
        self.next_event = 0
        self.location = ""
        if serve:
            self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._listener.bind(("127.0.0.1", 0))
            self._listener.listen()
            self.location = "127.0.0.1:%d" % self._listener.getsockname()[1]
            threading.Thread(target=self._serve_values, daemon=True).start()
        self.sock = _connect(bus)
        self._send(encode_frame("HELLO", version=VERSION, name=name, location=self.location,
                                token=token))
        first = read_frame(self.sock, max_frame)
        if first is None:
            raise ConnectionError("closed during the handshake")
        kind, f = decode_frame(first, max_frame, terms_as_text=False)
        if kind == "END":
            raise ConnectionError(f["reason"])
        if kind != "REG":
            raise ConnectionError(f"REG expected, got {kind}")
        self.id, self.threshold = f["tool"], f["threshold"]
        self._stop = threading.Event()
        every = max(f["lease_ms"], 3) / 3000.0
        threading.Thread(target=self._ping, args=(every,), daemon=True).start()

    def _send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def _ping(self, every):
        nonce = 0
        while not self._stop.wait(every):
            nonce += 1
            try:
                self._send(encode_frame("PING", nonce=nonce))
            except OSError:
                return

    def next_request(self):
        """(kind, fields) of the next request: EVAL, DO, ACK_EVENT, FIN, FAIL, TERMINATE.
        Raises ConnectionError on END or a closed connection."""
        while True:
            data = read_frame(self.sock, self.max_frame)
            if data is None:
                raise ConnectionError("connection closed")
            kind, f = decode_frame(data, self.max_frame, terms_as_text=False)
            if kind == "FIN":
                self.store.pop(f["var"], None)
            if kind == "END":
                raise ConnectionError(f["reason"])
            if kind in ("PING", "UNKNOWN"):
                continue
            return kind, f

    def value(self, request, t):
        self._send(encode_frame("VALUE", request=request, term=t))

    def event(self, t):
        self.next_event += 1
        self._send(encode_frame("EVENT", event=self.next_event, term=t))
        return self.next_event

    def note(self, t):
        self._send(encode_frame("NOTE", term=t))

    def put(self, t):
        """The term to send: `t` itself when small (or when passive), else a reference."""
        data = T.encode_term(t)
        if not self.location or len(data) <= self.threshold:
            return t
        self.next_var += 1
        self.store[self.next_var] = data
        return T.ref(self.id, self.next_var, len(data), self.location, T.signature(t))

    def resolve(self, t, delivery):
        """`t` with its references fetched (once each), then ACK of `delivery`."""
        for r in T.refs(t):
            key = (r[1], r[2])
            if key in self.cache:
                continue
            if r[1] == self.id:
                data = self.store[r[2]]
            else:
                data = self._fetch(r, delivery)
                self.fetches += 1
            self.cache[key] = T.decode_term(data)
        out = T.replace_refs(t, self.cache)
        if delivery:
            self._send(encode_frame("ACK", delivery=delivery))
        return out

    def release(self, t):
        for r in T.refs(t):
            self.cache.pop((r[1], r[2]), None)

    def close(self):
        self._stop.set()
        try:
            self._send(encode_frame("END", reason="bye"))
            self.sock.close()
        except OSError:
            pass

    def _fetch(self, r, delivery):
        _, owner, var_id, size, location, _sig = r
        if not location:
            raise TransferFailed("owner is passive")
        s = _connect(location)
        try:
            s.sendall(encode_frame("GET", delivery=delivery, var=var_id, offset=0,
                                   window=self.window))
            out = bytearray()
            since = 0
            while len(out) < size:
                data = read_frame(s, self.chunk + 64 + self.max_frame)
                if data is None:
                    raise TransferFailed("owner closed the transfer")
                kind, f = decode_frame(data, 1 << 62, terms_as_text=False)
                if kind == "FAIL":
                    raise TransferFailed(f"code {f['code']}: {f['detail']}")
                if kind != "PUT" or f["offset"] != len(out) or f["total"] != size:
                    raise TransferFailed(f"unexpected {kind}")
                out += f["data"]
                since += len(f["data"])
                if since >= self.window // 2 and len(out) < size:
                    s.sendall(encode_frame("CREDIT", var=var_id, bytes=since))
                    since = 0
            try:
                # Best effort, as in the Rust client: the owner may have closed already.
                s.sendall(encode_frame("END", reason="done"))
            except OSError:
                pass
            return bytes(out)
        finally:
            s.close()

    def _serve_values(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn):
        try:
            while True:
                data = read_frame(conn, 1024)
                if data is None:
                    return
                kind, f = decode_frame(data, 1024, terms_as_text=False)
                if kind != "GET":
                    return
                value = self.store.get(f["var"])
                if value is None:
                    conn.sendall(encode_frame("FAIL", delivery=f["delivery"], code=3,
                                              detail="no variable %d" % f["var"]))
                    continue
                pos, allowed, total = min(f["offset"], len(value)), f["window"], len(value)
                while pos < total:
                    if allowed == 0:
                        data = read_frame(conn, 1024)
                        if data is None:
                            return
                        kind, c = decode_frame(data, 1024, terms_as_text=False)
                        if kind != "CREDIT":
                            return
                        allowed += c["bytes"]
                        continue
                    n = min(self.chunk, allowed, total - pos)
                    conn.sendall(encode_frame("PUT", var=f["var"], offset=pos, total=total,
                                              data=value[pos:pos + n]))
                    pos += n
                    allowed -= n
        except (OSError, FrameError):
            return
        finally:
            conn.close()
