"""Bus frames (docs/WIRE.md, Bus frames): u32 LEN, u8 KIND, body; big endian; str = u16 length +
UTF-8; term = u32 length + term stream; bytes to the end. Fields as in
testdata/vectors/bus/frames.json (terms as text)."""

import struct

from .term import TermError, decode_term, encode_term, to_text

VERSION = 1
DEFAULT_MAX_FRAME = 16 << 20

KINDS = {
    0x01: ("HELLO", [("version", "u16"), ("name", "str"), ("location", "str"), ("token", "str")]),
    0x02: ("REG", [("version", "u16"), ("tool", "u64"), ("lease_ms", "u32"), ("threshold", "u32")]),
    0x10: ("EVAL", [("request", "u64"), ("delivery", "u64"), ("term", "term")]),
    0x11: ("VALUE", [("request", "u64"), ("term", "term")]),
    0x12: ("DO", [("delivery", "u64"), ("term", "term")]),
    0x13: ("EVENT", [("event", "u64"), ("term", "term")]),
    0x14: ("ACK_EVENT", [("event", "u64"), ("delivery", "u64"), ("term", "term")]),
    0x15: ("TERMINATE", [("term", "term")]),
    0x16: ("NOTE", [("term", "term")]),
    0x20: ("GET", [("delivery", "u64"), ("var", "u64"), ("offset", "u64"), ("window", "u32")]),
    0x21: ("PUT", [("var", "u64"), ("offset", "u64"), ("total", "u64"), ("data", "bytes")]),
    0x22: ("CREDIT", [("var", "u64"), ("bytes", "u32")]),
    0x23: ("ACK", [("delivery", "u64")]),
    0x24: ("FIN", [("var", "u64")]),
    0x25: ("END", [("reason", "str")]),
    0x26: ("FAIL", [("delivery", "u64"), ("code", "u8"), ("detail", "str")]),
    0x27: ("PING", [("nonce", "u64")]),
}
BY_NAME = {name: (kind, fields) for kind, (name, fields) in KINDS.items()}
SIZES = {"u8": 1, "u16": 2, "u32": 4, "u64": 8}
FMT = {"u8": ">B", "u16": ">H", "u32": ">I", "u64": ">Q"}


class FrameError(ValueError):
    """A frame that does not decode; `variant` names the Rust decoder's error."""

    def __init__(self, variant, detail=""):
        super().__init__(f"{variant}: {detail}")
        self.variant = variant


def frame_len(buf, max_frame=DEFAULT_MAX_FRAME):
    """Whole frame size from its first 4 bytes, or None if fewer are there."""
    if len(buf) < 4:
        return None
    n = struct.unpack(">I", bytes(buf[:4]))[0]
    if n == 0:
        raise FrameError("Empty")
    if n > max_frame:
        raise FrameError("TooLarge", f"{n} > {max_frame}")
    return 4 + n


def decode_frame(buf, max_frame=DEFAULT_MAX_FRAME, terms_as_text=True):
    """(kind name, fields); terms as text (the vectors' form) or as term tuples."""
    total = frame_len(buf, max_frame)
    if total is None or total > len(buf):
        raise FrameError("Truncated", "frame")
    if total < len(buf):
        raise FrameError("Trailing", "frame")
    kind = buf[4]
    body = bytes(buf[5:])
    if kind not in KINDS:
        return "UNKNOWN", {"kind": "UNKNOWN", "kind_byte": kind, "body_hex": body.hex()}
    name, spec = KINDS[kind]
    pos = 0
    out = {"kind": name}

    def take(n, field):
        nonlocal pos
        if pos + n > len(body):
            raise FrameError("Truncated", f"{name} {field}")
        b = body[pos:pos + n]
        pos += n
        return b

    for field, ty in spec:
        if ty in SIZES:
            out[field] = struct.unpack(FMT[ty], take(SIZES[ty], field))[0]
        elif ty == "str":
            n = struct.unpack(">H", take(2, field))[0]
            try:
                out[field] = take(n, field).decode("utf-8")
            except UnicodeDecodeError:
                raise FrameError("Utf8", f"{name} {field}") from None
        elif ty == "term":
            n = struct.unpack(">I", take(4, "term"))[0]
            b = take(n, "term")
            try:
                t = decode_term(b)
            except TermError as e:
                raise FrameError("Term", f"{name}: {e}") from None
            out[field] = to_text(t) if terms_as_text else t
        elif ty == "bytes":
            out["data_hex" if terms_as_text else "data"] = body[pos:].hex() if terms_as_text else body[pos:]
            pos = len(body)
    if pos != len(body):
        raise FrameError("Trailing", f"{name}: {len(body) - pos} bytes")
    return name, out


def encode_frame(kind_name, /, **fields):
    """Bytes of a frame; terms given as term tuples, PUT data as bytes."""
    kind, spec = BY_NAME[kind_name]
    body = bytearray([kind])
    for field, ty in spec:
        v = fields[field]
        if ty in SIZES:
            body += struct.pack(FMT[ty], v)
        elif ty == "str":
            b = v.encode("utf-8")
            body += struct.pack(">H", len(b)) + b
        elif ty == "term":
            b = encode_term(v)
            body += struct.pack(">I", len(b)) + b
        else:
            body += v
    return struct.pack(">I", len(body)) + bytes(body)
