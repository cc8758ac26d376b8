"""The term text syntax, parsed (issue 19 §1 "Terms: … a text syntax"; seed 003's terms;
docs/BUS.md "Terms"): the grammar of the Rust arena's `parse` (crates/bus/src/term.rs,
`TextParser`), as the Java `TermParser` reads it too, so a text any client prints parses
back in every other to the same term and the same term stream.

    integers -42, reals 2.5 1e-3, "strings" with the escapes \\" \\\\ \\n \\t \\r \\xHH,
    fun(args…) and fun, [items…], <type>, #"hex" blobs, t{annos…}, variables X and result
    variables X?, references @ref(owner,var,size,"location",sig);
    white space and % comments (to the end of the line) between tokens.

Errors are `TermParseError` with the line and column (from 1, in characters) where the
parser stopped, as the Rust and Java parsers report them. Nesting deeper than `MAX_DEPTH`
is refused; every nesting level costs this parser one Python frame (lists, arguments and
annotations are read in the same frame), so the deepest accepted text stays well within
Python's default recursion limit.
"""

import math
import struct

from .term import MAX_DEPTH

# Rust's char::is_whitespace (Unicode White_Space), not str.isspace (which also takes
# U+001C..U+001F): the same texts are white space in every client.
_WHITE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                   "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_HEX = frozenset("0123456789abcdefABCDEF")
_I64 = (-(1 << 63), (1 << 63) - 1)


class TermParseError(ValueError):
    """Text that is not a term: `line` and `col` (from 1) say where, `msg` why."""

    def __init__(self, line, col, msg):
        super().__init__(f"{line}:{col}: {msg}")
        self.line = line
        self.col = col
        self.msg = msg


def _ascii_alnum(c):
    return c is not None and c.isascii() and c.isalnum()


def _digit(c):
    return c is not None and "0" <= c <= "9"


class _Parser:
    def __init__(self, src):
        self.src = src
        self.pos = 0

    def error(self, msg):
        before = self.src[:min(self.pos, len(self.src))]
        line = before.count("\n") + 1
        col = len(before) - (before.rfind("\n") + 1) + 1
        return TermParseError(line, col, msg)

    def peek(self):
        return self.src[self.pos] if self.pos < len(self.src) else None

    def peek2(self):
        return self.src[self.pos + 1] if self.pos + 1 < len(self.src) else None

    def bump(self):
        c = self.peek()
        if c is not None:
            self.pos += 1
        return c

    def eat(self, c):
        if self.peek() == c:
            self.pos += 1
            return True
        return False

    def expect(self, c):
        self.skip_ws()
        if not self.eat(c):
            raise self.error(f"expected '{c}'")

    def skip_ws(self):
        src, n = self.src, len(self.src)
        while self.pos < n:
            c = src[self.pos]
            if c in _WHITE:
                self.pos += 1
            elif c == "%":
                end = src.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            else:
                return

    def ident(self):
        """[A-Za-z0-9_-]* not ending in '-'."""
        start = self.pos
        while True:
            c = self.peek()
            if _ascii_alnum(c) or c == "_" or (c == "-" and self.pos > start):
                self.pos += 1
            else:
                break
        while self.pos > start and self.src[self.pos - 1] == "-":
            self.pos -= 1
        return self.src[start:self.pos]

    def string(self):
        if not self.eat('"'):
            raise self.error("expected '\"'")
        out = []
        while True:
            c = self.bump()
            if c is None:
                raise self.error("unterminated string")
            if c == '"':
                return "".join(out)
            if c != "\\":
                out.append(c)
                continue
            e = self.bump()
            if e in ('"', "\\"):
                out.append(e)
            elif e == "n":
                out.append("\n")
            elif e == "t":
                out.append("\t")
            elif e == "r":
                out.append("\r")
            elif e == "x":
                h = self.src[self.pos:self.pos + 2]
                self.pos = min(self.pos + 2, len(self.src))
                if len(h) != 2 or not all(d in _HEX for d in h):
                    raise self.error("expected two hex digits after \\x")
                out.append(chr(int(h, 16)))
            else:
                raise self.error("unknown escape")

    def number(self):
        start = self.pos
        self.eat("-")
        while _digit(self.peek()):
            self.pos += 1
        real = False
        if self.peek() == "." and _digit(self.peek2()):
            real = True
            self.pos += 1
            while _digit(self.peek()):
                self.pos += 1
        if self.peek() in ("e", "E"):
            real = True
            self.pos += 1
            if self.peek() in ("+", "-"):
                self.pos += 1
            while _digit(self.peek()):
                self.pos += 1
        text = self.src[start:self.pos]
        if real:
            # What Rust's f64 parser takes here: digits around the dot and exponent, no
            # "1e", no lone "-e5"; finite only.
            mant, sep, exp = text.lower().partition("e")
            ok = any(_digit(d) for d in mant) and (not sep or exp.lstrip("+-") != "")
            try:
                x = float(text) if ok else None
            except ValueError:
                x = None
            if x is None or not math.isfinite(x):
                raise self.error(f"invalid real '{text}'")
            return ("real", x, struct.pack(">d", x))
        # (A length bound first: int() refuses texts of thousands of digits with ValueError.)
        if text in ("", "-") or len(text) > 20:
            raise self.error(f"invalid integer '{text}'")
        n = int(text)
        if not _I64[0] <= n <= _I64[1]:
            raise self.error(f"invalid integer '{text}'")
        return ("int", n)

    def term(self, depth):
        if depth > MAX_DEPTH:
            raise self.error(f"nesting deeper than {MAX_DEPTH}")
        self.skip_ws()
        c = self.peek()
        close = None  # a sequence follows: its items are read below, in this frame
        if c is None:
            raise self.error("expected a term, found the end")
        if _digit(c) or c == "-":
            t = self.number()
        elif c == '"':
            t = ("str", self.string())
        elif c == "[":
            self.pos += 1
            head, close = ("list",), "]"
        elif c == "<":
            self.pos += 1
            ty = self.term(depth + 1)
            self.expect(">")
            t = ("ph", ty)
        elif c == "#":
            self.pos += 1
            h = self.string()
            if len(h) % 2 or not all(d in _HEX for d in h):
                raise self.error("invalid hex in blob")
            t = ("blob", bytes.fromhex(h))
        elif c == "@":
            self.pos += 1
            if self.ident() != "ref":
                raise self.error("expected 'ref' after '@'")
            self.expect("(")
            nums = []
            for _ in range(3):
                self.skip_ws()
                if not (self.peek() == "-" or _digit(self.peek())):
                    raise self.error("expected a non-negative integer")
                n = self.number()
                if n[0] != "int" or n[1] < 0:
                    raise self.error("expected a non-negative integer")
                nums.append(n[1])
                self.expect(",")
            self.skip_ws()
            location = self.string()
            self.expect(",")
            sig = self.term(depth + 1)
            self.expect(")")
            t = ("ref", nums[0], nums[1], nums[2], location, sig)
        elif c.isascii() and c.isupper():
            name = self.ident()
            t = ("var", name, self.eat("?"))
        elif c.isascii() and c.islower():
            fun = self.ident()
            if self.eat("("):
                head, close = ("appl", fun), ")"
            else:
                t = ("appl", fun, ())
        else:
            raise self.error(f"unexpected '{c}'")
        while True:
            if close is not None:
                items = []
                self.skip_ws()
                if not self.eat(close):
                    while True:
                        items.append(self.term(depth + 1))
                        self.skip_ws()
                        if self.eat(close):
                            break
                        if not self.eat(","):
                            raise self.error(f"expected ',' or '{close}'")
                if head[0] == "annot":
                    if not items:
                        raise self.error("empty annotation")
                    return ("annot", head[1], tuple(items))
                t = head + (tuple(items),)
                close = None
            if self.peek() != "{":
                return t
            self.pos += 1
            head, close = ("annot", t), "}"


def parse_term(src):
    """The term `src` spells (surrounding white space and comments allowed), as the tagged
    tuples of `viastack_bus.term`; `TermParseError` (line:col) when it spells none."""
    p = _Parser(src)
    p.skip_ws()
    t = p.term(0)
    p.skip_ws()
    if p.pos < len(src):
        raise p.error("expected the end of the term")
    return t
