"""A bus tool in Python: the same API as the Rust client (crates/bus/src/client.rs)."""

import collections
import fcntl
import hashlib
import mmap
import os
import secrets
import shutil
import subprocess
import tempfile
import select
import socket
import ssl
import struct
import threading

from . import term as T
from .wire import DEFAULT_MAX_FRAME, VERSION, FrameError, decode_frame, encode_frame


class TransferFailed(RuntimeError):
    """A reference could not be fetched (owner lost, unknown variable, refused)."""


class OwnerUnverified(TransferFailed):
    """The owner's listener is not the one the bus vouched for: its certificate does not match
    the reference's pinned fingerprint (`tls:ADDR;sha256=FP`), or it serves plain TCP while
    this tool is on a TLS bus (docs/BUS.md "TLS on the owners' listeners")."""


TLS_PREFIX, TLS_PIN = "tls:", ";sha256="


def _parse_tls_location(location):
    """(address, 32-byte fingerprint) of a `tls:ADDR;sha256=HEX` location, or None."""
    if not location.startswith(TLS_PREFIX) or TLS_PIN not in location:
        return None
    addr, fp = location[len(TLS_PREFIX):].rsplit(TLS_PIN, 1)
    try:
        pin = bytes.fromhex(fp)
    except ValueError:
        return None
    return (addr, pin) if len(pin) == 32 else None


def _pinned_connect(location):
    """TLS to an owner, accepting only the certificate the location pins (its SHA-256); the
    handshake's signature is checked with that certificate by OpenSSL whatever the verify
    mode, so a peer without its key cannot present it."""
    parsed = _parse_tls_location(location)
    if parsed is None:
        raise OwnerUnverified(f"{location}: malformed TLS location")
    addr, pin = parsed
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    raw = _connect(addr)
    try:
        s = ctx.wrap_socket(raw, server_hostname="viastack-bus-owner")
    except ssl.SSLError as e:
        raw.close()
        raise OwnerUnverified(f"{location}: handshake failed: {e}") from e
    der = s.getpeercert(binary_form=True)
    if der is None or hashlib.sha256(der).digest() != pin:
        s.close()
        raise OwnerUnverified(f"{location}: the owner's certificate does not match its pin")
    return s


def _self_signed(directory):
    """A throwaway certificate and key (PEM files in `directory`) made with the openssl
    command, or None when it is not installed (the standard library cannot make one)."""
    if shutil.which("openssl") is None:
        return None
    cert, key = os.path.join(directory, "owner.pem"), os.path.join(directory, "owner.key")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "30",
                        "-subj", "/CN=viastack-bus-owner", "-keyout", key, "-out", cert],
                       capture_output=True)
    return (cert, key) if r.returncode == 0 else None


def _memfd_sealed(data):
    """A sealed memfd holding `data` (no one can write, grow or shrink it afterwards)."""
    fd = os.memfd_create("viastack-bus-value", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_SEAL)
        return fd
    except OSError:
        os.close(fd)
        raise


def _memfd_read(fd, size, offset=0):
    """The `size` bytes at `offset` of a received memfd (then closed); a Rust owner's shared
    blob puts its stream after a gap (crates/bus/src/memfd.rs `shared_blob`)."""
    try:
        if os.fstat(fd).st_size < offset + size:
            raise TransferFailed("memfd shorter than the reference's size")
        if size == 0:
            return b""
        with mmap.mmap(fd, offset + size, prot=mmap.PROT_READ) as m:
            return bytes(m[offset:offset + size])
    finally:
        os.close(fd)


LOCAL = ";local="


def split_local(location):
    """(base, (boot_id, path) or None): a location with its same-host part split off. A Rust
    owner serving TCP also listens on a Unix socket and announces it as
    `BASE;local=BOOT_ID@/path` (crates/bus/src/client.rs): a consumer on the same host (same
    kernel boot id) fetches there as a memfd; others use BASE."""
    if LOCAL in location:
        base, tail = location.rsplit(LOCAL, 1)
        if "@" in tail:
            boot, path = tail.split("@", 1)
            if path:
                return base, (boot, path)
        return base, None
    return location, None


def boot_id():
    """The kernel's boot id (one per host and boot), or None."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _connect(location):
    if location.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(location[5:])
    else:
        host, port = location.rsplit(":", 1)
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _tls_connect(location, ca_file, server_name):
    """TLS to the bus (TCP): the certificate is checked against `ca_file` (a CA, or the bus's
    own self-signed certificate) and `server_name`. One thread owns the TLS session and carries
    bytes to and from a socket pair, so the tool's reader and its PING thread use a plain
    socket (an SSL socket must not be read and written from two threads)."""
    ctx = ssl.create_default_context(cafile=ca_file)
    raw = _connect(location)
    tls = ctx.wrap_socket(raw, server_hostname=server_name)
    app, inner = socket.socketpair()
    threading.Thread(target=_tls_shuttle, args=(tls, inner), daemon=True).start()
    return app


def _tls_shuttle(tls, inner):
    tls.setblocking(False)
    inner.setblocking(False)
    to_tls, to_app = bytearray(), bytearray()
    app_open = True
    try:
        while True:
            r, w = [], []
            if len(to_app) < (1 << 20):
                r.append(tls)
            if app_open and len(to_tls) < (1 << 20):
                r.append(inner)
            if to_tls:
                w.append(tls)
            if to_app:
                w.append(inner)
            if not r and not w:
                return
            if tls.pending():
                rr, ww = [tls], []
            else:
                rr, ww, _ = select.select(r, w, [])
            if tls in rr:
                try:
                    data = tls.recv(1 << 16)
                    if not data:
                        inner.setblocking(True)
                        inner.sendall(to_app)
                        inner.close()
                        return
                    to_app += data
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            if inner in rr:
                try:
                    data = inner.recv(1 << 16)
                    if not data:
                        app_open = False
                    to_tls += data
                except BlockingIOError:
                    pass
            if to_tls:
                try:
                    n = tls.send(to_tls)
                    del to_tls[:n]
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass
            if to_app:
                try:
                    n = inner.send(to_app)
                    del to_app[:n]
                except BlockingIOError:
                    pass
            if not app_open and not to_tls:
                tls.close()
                inner.close()
                return
    except OSError:
        try:
            inner.close()
        except OSError:
            pass


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
                 max_frame=DEFAULT_MAX_FRAME, tls_ca=None, tls_name="localhost", memfd=True,
                 owner_cert=None, plain_owners=False):
        """`serve=False`: a passive tool (no listener); its large values still go by
        reference, fetched through the bus; `serve="unix:/path"` (or "host:port") names the
        listener. `tls_ca`: a PEM file of the roots to trust for a TLS bus (`bus serve
        --tls-cert/--tls-key`), checked against `tls_name`; on a TLS bus a TCP listener
        serves TLS too, with `owner_cert` (cert, key) PEM files or a throwaway certificate
        (the openssl command), pinned in its location; `plain_owners=True` still fetches from
        plain-TCP owners then. `memfd`: same-host values in a sealed memfd over Unix
        sockets (asking as a consumer, answering as an owner)."""
        self.max_frame = max_frame
        self.window = window
        self.chunk = chunk
        self.store = {}
        self.lock = threading.Lock()
        self.cache = {}
        self.fetches = 0
        self.memfd_fetches = 0
        self.local_fetches = 0
        self.tls_fetches = 0
        self.unverified_owners = 0
        self.memfd = memfd and hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
        self.tls_bus = bool(tls_ca)
        self.plain_owners = plain_owners
        self.next_event = 0
        self.location = ""
        self._owner_ctx = None
        if serve:
            where = "127.0.0.1:0" if serve is True else serve
            if where.startswith("unix:"):
                path = where[5:]
                if os.path.exists(path):
                    os.unlink(path)
                self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self._listener.bind(path)
                self.location = where
            else:
                host, port = where.rsplit(":", 1)
                self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                self._listener.bind((host, int(port)))
                self.location = "%s:%d" % (host, self._listener.getsockname()[1])
                if owner_cert is None and tls_ca:
                    self._cert_dir = tempfile.TemporaryDirectory()
                    owner_cert = _self_signed(self._cert_dir.name)
                if owner_cert is not None:
                    self._owner_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                    self._owner_ctx.load_cert_chain(*owner_cert)
                    with open(owner_cert[0]) as f:
                        der = ssl.PEM_cert_to_DER_cert(f.read())
                    self.location = "%s%s%s%s" % (TLS_PREFIX, self.location, TLS_PIN,
                                                  hashlib.sha256(der).hexdigest())
            self._listener.listen()
            threading.Thread(target=self._serve_values, daemon=True).start()
        self.pending = collections.deque()
        self.relaying = {}
        self.sock = _tls_connect(bus, tls_ca, tls_name) if tls_ca else _connect(bus)
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
            if self.pending:
                kind, f = self.pending.popleft()
            else:
                kind, f = self._read_bus()
                if self._owner_frame(kind, f):
                    continue
            if kind == "FIN":
                self.store.pop(f["var"], None)
            if kind == "END":
                raise ConnectionError(f["reason"])
            if kind in ("PING", "UNKNOWN"):
                continue
            return kind, f

    def _read_bus(self):
        data = read_frame(self.sock, self.max_frame)
        if data is None:
            raise ConnectionError("connection closed")
        return decode_frame(data, self.max_frame, terms_as_text=False)

    def _owner_frame(self, kind, f):
        """A GET or CREDIT the bus relays to this (passive) owner: answered with PUT chunks
        on the bus connection within the window. True when handled."""
        if kind == "GET":
            if f["var"] not in self.store:
                self._send(encode_frame("FAIL", delivery=f["delivery"], code=3,
                                        detail="no variable %d" % f["var"]))
                return True
            self.relaying[f["var"]] = [f["offset"], f["window"]]
            self._pump_relay(f["var"])
            return True
        if kind == "CREDIT":
            if f["var"] in self.relaying:
                self.relaying[f["var"]][1] += f["bytes"]
                self._pump_relay(f["var"])
            return True
        return False

    def _pump_relay(self, var):
        value = self.store.get(var)
        pos, allowed = self.relaying[var]
        if value is None:
            del self.relaying[var]
            return
        total = len(value)
        while pos < total and allowed > 0:
            n = min(self.chunk, allowed, total - pos)
            self._send(encode_frame("PUT", var=var, offset=pos, total=total,
                                    data=value[pos:pos + n]))
            pos += n
            allowed -= n
        if pos >= total:
            del self.relaying[var]
        else:
            self.relaying[var] = [pos, allowed]

    def _fetch_relayed(self, r, delivery):
        """A passive owner's value through the bus: GET/CREDIT on the bus connection, the
        owner's PUT chunks relayed back; other frames meanwhile wait for next_request."""
        _, _owner, var_id, size, _location, _sig = r
        self._send(encode_frame("GET", delivery=delivery, var=var_id, offset=0,
                                window=self.window))
        out = bytearray()
        since = 0
        while len(out) < size:
            kind, f = self._read_bus()
            if self._owner_frame(kind, f):
                continue
            if kind == "PUT" and f["var"] == var_id:
                if f["offset"] != len(out) or f["total"] != size:
                    raise TransferFailed("relayed PUT out of order")
                out += f["data"]
                since += len(f["data"])
                if since >= self.window // 2 and len(out) < size:
                    self._send(encode_frame("CREDIT", var=var_id, bytes=since))
                    since = 0
            elif kind == "FAIL" and f["delivery"] == delivery:
                raise TransferFailed(f"code {f['code']}: {f['detail']}")
            elif kind == "END":
                raise ConnectionError(f["reason"])
            else:
                self.pending.append((kind, f))
        return bytes(out)

    def value(self, request, t):
        self._send(encode_frame("VALUE", request=request, term=t))

    def event(self, t):
        self.next_event += 1
        self._send(encode_frame("EVENT", event=self.next_event, term=t))
        return self.next_event

    def note(self, t):
        self._send(encode_frame("NOTE", term=t))

    def put(self, t):
        """The term to send: `t` itself when small, else a reference (a passive tool's has
        no location: consumers get it through the bus)."""
        data = T.encode_term(t)
        if len(data) <= self.threshold:
            return t
        var = self._fresh_var()
        self.store[var] = data
        return T.ref(self.id, var, len(data), self.location, T.signature(t))

    def _fresh_var(self):
        # 62 random bits, never 0 nor in use: the variable number is the value's capability
        # (the owner serves a GET for any variable it holds), so it must not be guessable.
        while True:
            var = secrets.randbits(62)
            if var and var not in self.store:
                return var

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
            return self._fetch_relayed(r, delivery)
        location, local = split_local(location)
        if local is not None and self.memfd and local[0] == boot_id():
            # Same host: the owner's Unix socket, a memfd; unreachable, the base location.
            try:
                s = _connect("unix:" + local[1])
            except OSError:
                s = None
            if s is not None:
                try:
                    data = self._fetch_memfd(s, delivery, var_id, size)
                    if data is not None:
                        self.memfd_fetches += 1
                        self.local_fetches += 1
                        return data
                    return self._stream_on(s, delivery, var_id, size)
                finally:
                    s.close()
        try:
            if location.startswith(TLS_PREFIX):
                s = _pinned_connect(location)
                tls = True
            elif self.tls_bus and not self.plain_owners and not location.startswith("unix:"):
                raise OwnerUnverified(
                    f"{location}: the owner serves plain TCP while this tool is on a TLS bus")
            else:
                s = _connect(location)
                tls = False
        except OwnerUnverified:
            self.unverified_owners += 1
            raise
        try:
            if self.memfd and location.startswith("unix:"):
                data = self._fetch_memfd(s, delivery, var_id, size)
                if data is not None:
                    self.memfd_fetches += 1
                    return data
            data = self._stream_on(s, delivery, var_id, size)
            self.tls_fetches += tls
            return data
        finally:
            s.close()

    def _fetch_memfd(self, s, delivery, var_id, size):
        """GET with window 0 asks a same-host owner for a sealed memfd (crates/bus/src/memfd.rs):
        its answer is a PUT without data and the descriptor, or FAIL 2 (then None: stream on
        the same connection)."""
        s.sendall(encode_frame("GET", delivery=delivery, var=var_id, offset=0, window=0))
        head, fds, _flags, _addr = socket.recv_fds(s, 4, 1)
        try:
            if not head:
                raise TransferFailed("owner closed the transfer")
            if len(head) < 4:
                rest = _read_exact(s, 4 - len(head))
                if rest is None:
                    raise TransferFailed("owner closed the transfer")
                head += rest
            n = struct.unpack(">I", head)[0]
            if n == 0 or n > 64 * 1024:
                raise TransferFailed("memfd answer too long")
            body = _read_exact(s, n)
            if body is None:
                raise TransferFailed("owner closed the transfer")
            kind, f = decode_frame(head + body, 64 * 1024, terms_as_text=False)
            if (kind == "PUT" and f["var"] == var_id and f["offset"] >= 0
                    and f["total"] == size and not f["data"]):
                if not fds:
                    raise TransferFailed("memfd PUT without a descriptor")
                fd = fds.pop(0)
                data = _memfd_read(fd, size, f["offset"])
                try:
                    s.sendall(encode_frame("END", reason="done"))
                except OSError:
                    pass
                return data
            if kind == "FAIL" and f["code"] == 2:
                return None
            if kind == "FAIL":
                raise TransferFailed(f"code {f['code']}: {f['detail']}")
            raise TransferFailed(f"unexpected {kind} for a memfd GET")
        finally:
            for fd in fds:
                os.close(fd)

    def _stream_on(self, s, delivery, var_id, size):
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

    def _serve_values(self):
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn):
        unix = conn.family == socket.AF_UNIX
        try:
            if self._owner_ctx is not None and not unix:
                conn = self._owner_ctx.wrap_socket(conn, server_side=True)
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
                if f["window"] == 0:
                    # A memfd asked for (same host, Unix socket): PUT without data, fd attached.
                    self._answer_memfd(conn, unix, f, value)
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
        except (OSError, FrameError, ssl.SSLError):
            return
        finally:
            conn.close()

    def _answer_memfd(self, conn, unix, f, value):
        head = encode_frame("PUT", var=f["var"], offset=0, total=len(value), data=b"")
        fd = None
        try:
            if not (unix and self.memfd):
                raise OSError("memfd not offered")
            fd = _memfd_sealed(value)
            n = socket.send_fds(conn, [head], [fd])
            if n < len(head):
                conn.sendall(head[n:])
        except OSError as e:
            conn.sendall(encode_frame("FAIL", delivery=f["delivery"], code=2,
                                      detail="no memfd: %s" % e))
        finally:
            if fd is not None:
                os.close(fd)
