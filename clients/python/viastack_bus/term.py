"""Terms as tagged tuples, their text form and their binary streams (docs/WIRE.md, Bus terms).

("int", n) ("real", x, bits) ("str", s) ("appl", fun, (args…)) ("list", (items…))
("ph", t) ("blob", bytes) ("annot", t, (annos…)) ("var", name, result)
("ref", owner, var, size, location, sig)

Equal terms are equal tuples, so a dictionary finds shared subterms: the encoder writes a
subterm met again as a back reference, as the Rust arena (maximal sharing) does, and both
produce the same bytes.
"""

import struct

MAGIC = b"VB\x01"
MAX_DEPTH = 512


class TermError(ValueError):
    """A term stream that does not decode: `variant` names the Rust error, `at` the byte."""

    def __init__(self, variant, at=0):
        super().__init__(f"{variant} at byte {at}")
        self.variant = variant
        self.at = at


def integer(n):
    return ("int", int(n))


def real(x):
    x = float(x)
    return ("real", x, struct.pack(">d", x))


def string(s):
    return ("str", s)


def appl(fun, *args):
    return ("appl", fun, tuple(args))


def lst(*items):
    return ("list", tuple(items))


def placeholder(ty):
    return ("ph", appl(ty))


def blob(b):
    return ("blob", bytes(b))


def var(name, result=False):
    return ("var", name, bool(result))


def ref(owner, var_id, size, location, sig):
    return ("ref", owner, var_id, size, location, sig)


def _quote(s):
    out = ['"']
    for c in s:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif ord(c) < 0x20:
            out.append("\\x%02x" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def _real_text(x):
    # Rust's `{:?}` for f64: shortest round-trip digits, "1.0" for integers, "1e20" exponents.
    r = repr(x)
    if "e" in r:
        mant, exp = r.split("e")
        sign = "-" if exp.startswith("-") else ""
        return f"{mant}e{sign}{exp.lstrip('+-').lstrip('0') or '0'}"
    return r


def to_text(t):
    k = t[0]
    if k == "int":
        return str(t[1])
    if k == "real":
        return _real_text(t[1])
    if k == "str":
        return _quote(t[1])
    if k == "appl":
        return t[1] + ("(" + ",".join(to_text(a) for a in t[2]) + ")" if t[2] else "")
    if k == "list":
        return "[" + ",".join(to_text(a) for a in t[1]) + "]"
    if k == "ph":
        return "<" + to_text(t[1]) + ">"
    if k == "blob":
        return '#"' + t[1].hex() + '"'
    if k == "annot":
        return to_text(t[1]) + "{" + ",".join(to_text(a) for a in t[2]) + "}"
    if k == "var":
        return t[1] + ("?" if t[2] else "")
    if k == "ref":
        return "@ref(%d,%d,%d,%s,%s)" % (t[1], t[2], t[3], _quote(t[4]), to_text(t[5]))
    raise TermError("Tag")


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n == 0:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def _str(s):
    b = s.encode("utf-8")
    return _varint(len(b)) + b


def _children(t):
    k = t[0]
    if k == "appl":
        return list(t[2])
    if k == "list":
        return list(t[1])
    if k == "ph":
        return [t[1]]
    if k == "annot":
        return [t[1]] + list(t[2])
    if k == "ref":
        return [t[5]]
    return []


def encode_term(t, magic=True):
    out = bytearray(MAGIC if magic else b"")
    index = {}
    stack = [t]
    while stack:
        t = stack.pop()
        if t in index:
            out += b"\x0a" + _varint(index[t])
            continue
        index[t] = len(index)
        k = t[0]
        if k == "int":
            n = t[1]
            out += b"\x01" + _varint(((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF)
        elif k == "real":
            out += b"\x02" + t[2]
        elif k == "str":
            out += b"\x03" + _str(t[1])
        elif k == "appl":
            out += b"\x04" + _str(t[1]) + _varint(len(t[2]))
        elif k == "list":
            out += b"\x05" + _varint(len(t[1]))
        elif k == "ph":
            out += b"\x06"
        elif k == "blob":
            out += b"\x07" + _varint(len(t[1])) + t[1]
        elif k == "annot":
            out += b"\x08" + _varint(len(t[2]))
        elif k == "var":
            out += b"\x09" + _str(t[1]) + (b"\x01" if t[2] else b"\x00")
        elif k == "ref":
            out += b"\x0b" + _varint(t[1]) + _varint(t[2]) + _varint(t[3]) + _str(t[4])
        stack.extend(reversed(_children(t)))
    return bytes(out)


class _Reader:
    def __init__(self, buf):
        self.buf = buf
        self.pos = 0

    def u8(self):
        if self.pos >= len(self.buf):
            raise TermError("Truncated", self.pos)
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self):
        at = self.pos
        v = 0
        for shift in range(0, 70, 7):
            b = self.u8()
            if shift == 63 and b > 1:
                raise TermError("Varint", at)
            v |= (b & 0x7F) << shift
            if not b & 0x80:
                return v
        raise TermError("Varint", at)

    def count(self):
        at = self.pos
        n = self.varint()
        if n > len(self.buf) - self.pos:
            raise TermError("Length", at)
        return n

    def bytes(self):
        n = self.count()
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return bytes(b)

    def str(self):
        at = self.pos
        try:
            return self.bytes().decode("utf-8")
        except UnicodeDecodeError:
            raise TermError("Utf8", at) from None


def decode_term(buf, magic=True):
    """Decodes a whole stream; raises TermError naming the Rust decoder's variant."""
    if magic:
        if bytes(buf[:3]) != MAGIC:
            raise TermError("Magic")
        buf = buf[3:]
    r = _Reader(buf)
    table = []
    stack = []  # [what, index, want, have]
    while True:
        at = r.pos
        tag = r.u8()
        done = None
        index = len(table)
        if tag == 0x0A:
            i = r.varint()
            if i >= len(table) or table[i] is None:
                raise TermError("BackRef", at)
            done = table[i]
        elif tag == 0x01:
            z = r.varint()
            done = integer((z >> 1) ^ -(z & 1))
        elif tag == 0x02:
            b = bytes(r.u8() for _ in range(8))
            done = ("real", struct.unpack(">d", b)[0], b)
        elif tag == 0x03:
            done = string(r.str())
        elif tag == 0x07:
            done = blob(r.bytes())
        elif tag == 0x09:
            name = r.str()
            fat = r.pos
            f = r.u8()
            if f > 1:
                raise TermError("Field", fat)
            done = var(name, f == 1)
        elif tag in (0x04, 0x05, 0x06, 0x08, 0x0B):
            if len(stack) >= MAX_DEPTH:
                raise TermError("Depth", at)
            if tag == 0x04:
                what, want = ("appl", r.str()), None
                want = r.count()
            elif tag == 0x05:
                what, want = ("list",), r.count()
            elif tag == 0x06:
                what, want = ("ph",), 1
            elif tag == 0x08:
                n = r.count()
                if n == 0:
                    raise TermError("Field", at)
                what, want = ("annot",), n + 1
            else:
                what = ("ref", r.varint(), r.varint(), r.varint(), r.str())
                want = 1
            table.append(None)
            stack.append([what, index, want, []])
        else:
            raise TermError("Tag", at)
        if done is not None and tag != 0x0A:
            table.append(done)
        while True:
            if done is not None:
                if not stack:
                    if r.pos != len(buf):
                        raise TermError("Trailing", r.pos)
                    return done
                stack[-1][3].append(done)
                done = None
                continue
            if not stack or len(stack[-1][3]) != stack[-1][2]:
                break
            what, idx, _, have = stack.pop()
            if what[0] == "appl":
                t = ("appl", what[1], tuple(have))
            elif what[0] == "list":
                t = ("list", tuple(have))
            elif what[0] == "ph":
                t = ("ph", have[0])
            elif what[0] == "annot":
                t = ("annot", have[0], tuple(have[1:]))
            else:
                t = ("ref",) + what[1:] + (have[0],)
            table[idx] = t
            done = t


def signature(t, max_str=64):
    """The shape of a value: blobs and long strings as placeholders."""
    k = t[0]
    if k == "blob":
        return placeholder("blob")
    if k == "str" and len(t[1].encode("utf-8")) > max_str:
        return placeholder("str")
    if k == "appl":
        return ("appl", t[1], tuple(signature(a, max_str) for a in t[2]))
    if k == "list":
        return ("list", tuple(signature(a, max_str) for a in t[1]))
    if k == "annot":
        return ("annot", signature(t[1], max_str), t[2])
    if k == "ref":
        return t[5]
    return t


def refs(t):
    """Distinct references in a term."""
    out, seen, stack = [], set(), [t]
    while stack:
        t = stack.pop()
        if t[0] == "ref":
            if (t[1], t[2]) not in seen:
                seen.add((t[1], t[2]))
                out.append(t)
            continue
        stack.extend(_children(t))
    return out


def replace_refs(t, values):
    k = t[0]
    if k == "ref":
        return values.get((t[1], t[2]), t)
    if k == "appl":
        return ("appl", t[1], tuple(replace_refs(a, values) for a in t[2]))
    if k == "list":
        return ("list", tuple(replace_refs(a, values) for a in t[1]))
    if k == "annot":
        return ("annot", replace_refs(t[1], values), t[2])
    return t
