package org.viastack.bus;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Binary term streams (docs/WIRE.md "Bus terms", the ATerm SAF lineage of seed 003): magic
 * {@code 56 42 01}, then the nodes in pre-order; a subterm met again is written as a back
 * reference to its first occurrence, so sharing survives the wire. The decoder never recurses
 * (depth bounded by {@link #MAX_DEPTH}) and refuses any malformed stream with a
 * {@link TermException}.
 */
public final class TermCodec {
    /** The stream's first bytes. */
    public static final byte[] MAGIC = {0x56, 0x42, 0x01};
    /** Deepest nesting of open applications, lists, placeholders, annotations, references. */
    public static final int MAX_DEPTH = 512;

    private TermCodec() {}

    /** The stream of {@code t}, with the magic. */
    public static byte[] encode(Term t) {
        return encode(t, true);
    }

    /** The stream of {@code t}; {@code magic} false leaves the three magic bytes out. */
    public static byte[] encode(Term t, boolean magic) {
        Out out = new Out(64 + blobBytes(t));
        if (magic) {
            out.put(MAGIC, 0, MAGIC.length);
        }
        Map<Term, Integer> index = new HashMap<>();
        ArrayDeque<Term> stack = new ArrayDeque<>();
        stack.push(t);
        while (!stack.isEmpty()) {
            Term n = stack.pop();
            Integer seen = index.get(n);
            if (seen != null) {
                out.u8(0x0a);
                out.varint(seen);
                continue;
            }
            index.put(n, index.size());
            if (n instanceof Term.Int i) {
                long v = i.value();
                out.u8(0x01);
                out.varint((v << 1) ^ (v >> 63));
            } else if (n instanceof Term.Real r) {
                out.u8(0x02);
                long bits = Double.doubleToRawLongBits(r.value());
                for (int s = 56; s >= 0; s -= 8) {
                    out.u8((int) (bits >>> s));
                }
            } else if (n instanceof Term.Str s) {
                out.u8(0x03);
                out.str(s.value());
            } else if (n instanceof Term.Appl a) {
                out.u8(0x04);
                out.str(a.fun());
                out.varint(a.args().size());
            } else if (n instanceof Term.Lst l) {
                out.u8(0x05);
                out.varint(l.items().size());
            } else if (n instanceof Term.Placeholder) {
                out.u8(0x06);
            } else if (n instanceof Term.Blob b) {
                out.u8(0x07);
                out.varint(b.data().length);
                out.put(b.data(), 0, b.data().length);
            } else if (n instanceof Term.Annot a) {
                out.u8(0x08);
                out.varint(a.annos().size());
            } else if (n instanceof Term.Var v) {
                out.u8(0x09);
                out.str(v.name());
                out.u8(v.result() ? 1 : 0);
            } else if (n instanceof Term.Ref r) {
                out.u8(0x0b);
                out.varint(r.owner());
                out.varint(r.var());
                out.varint(r.size());
                out.str(r.location());
            }
            List<Term> kids = n.children();
            for (int k = kids.size() - 1; k >= 0; k--) {
                stack.push(kids.get(k));
            }
        }
        return out.bytes();
    }

    /** The bytes of the blobs in {@code t} (counted once per occurrence, capped): the buffer's first guess. */
    private static int blobBytes(Term t) {
        long sum = 0;
        ArrayDeque<Term> stack = new ArrayDeque<>();
        stack.push(t);
        for (int seen = 0; !stack.isEmpty() && seen < 4096; seen++) {
            Term n = stack.pop();
            if (n instanceof Term.Blob b) {
                sum += b.data().length;
            }
            n.children().forEach(stack::push);
        }
        return (int) Math.min(sum, Integer.MAX_VALUE - 1024);
    }

    /** Decodes a whole stream (with its magic). */
    public static Term decode(byte[] buf) throws TermException {
        return decode(buf, 0, buf.length, true);
    }

    /** Decodes {@code buf[off..off+len)}; {@code magic} says whether it starts with the magic. */
    public static Term decode(byte[] buf, int off, int len, boolean magic) throws TermException {
        if (magic) {
            if (len < 3 || buf[off] != MAGIC[0] || buf[off + 1] != MAGIC[1] || buf[off + 2] != MAGIC[2]) {
                throw new TermException("Magic", 0);
            }
            off += 3;
            len -= 3;
        }
        Reader r = new Reader(buf, off, len);
        List<Term> table = new ArrayList<>();
        ArrayDeque<Open> stack = new ArrayDeque<>();
        while (true) {
            int at = r.pos;
            int tag = r.u8();
            Term done = null;
            int index = table.size();
            switch (tag) {
                case 0x0a -> {
                    long i = r.varint();
                    if (i < 0 || i >= table.size() || table.get((int) i) == null) {
                        throw new TermException("BackRef", at);
                    }
                    done = table.get((int) i);
                }
                case 0x01 -> {
                    long z = r.varint();
                    done = new Term.Int((z >>> 1) ^ -(z & 1));
                }
                case 0x02 -> {
                    long bits = 0;
                    for (int k = 0; k < 8; k++) {
                        bits = (bits << 8) | r.u8();
                    }
                    done = new Term.Real(Double.longBitsToDouble(bits));
                }
                case 0x03 -> done = new Term.Str(r.str());
                case 0x07 -> done = new Term.Blob(r.bytes());
                case 0x09 -> {
                    String name = r.str();
                    int fat = r.pos;
                    int f = r.u8();
                    if (f > 1) {
                        throw new TermException("Field", fat);
                    }
                    done = new Term.Var(name, f == 1);
                }
                case 0x04, 0x05, 0x06, 0x08, 0x0b -> {
                    if (stack.size() >= MAX_DEPTH) {
                        throw new TermException("Depth", at);
                    }
                    Open o = new Open(tag, index);
                    switch (tag) {
                        case 0x04 -> {
                            o.fun = r.str();
                            o.want = r.count();
                        }
                        case 0x05 -> o.want = r.count();
                        case 0x06 -> o.want = 1;
                        case 0x08 -> {
                            int n = r.count();
                            if (n == 0) {
                                throw new TermException("Field", at);
                            }
                            o.want = n + 1;
                        }
                        default -> {
                            o.owner = r.varint();
                            o.var = r.varint();
                            o.size = r.varint();
                            o.fun = r.str();
                            o.want = 1;
                        }
                    }
                    table.add(null);
                    stack.push(o);
                }
                default -> throw new TermException("Tag", at);
            }
            if (done != null && tag != 0x0a) {
                table.add(done);
            }
            while (true) {
                if (done != null) {
                    if (stack.isEmpty()) {
                        if (r.pos != r.len) {
                            throw new TermException("Trailing", r.pos);
                        }
                        return done;
                    }
                    stack.peek().have.add(done);
                    done = null;
                    continue;
                }
                if (stack.isEmpty() || stack.peek().have.size() != stack.peek().want) {
                    break;
                }
                Open o = stack.pop();
                List<Term> h = o.have;
                Term t = switch (o.tag) {
                    case 0x04 -> new Term.Appl(o.fun, h);
                    case 0x05 -> new Term.Lst(h);
                    case 0x06 -> new Term.Placeholder(h.get(0));
                    case 0x08 -> new Term.Annot(h.get(0), h.subList(1, h.size()));
                    default -> new Term.Ref(o.owner, o.var, o.size, o.fun, h.get(0));
                };
                table.set(o.index, t);
                done = t;
            }
        }
    }

    /** A node whose children are still being read. */
    private static final class Open {
        final int tag;
        final int index;
        int want;
        String fun;
        long owner;
        long var;
        long size;
        final List<Term> have = new ArrayList<>();

        Open(int tag, int index) {
            this.tag = tag;
            this.index = index;
        }
    }

    private static final class Reader {
        final byte[] buf;
        final int base;
        final int len;
        int pos;

        Reader(byte[] buf, int off, int len) {
            this.buf = buf;
            this.base = off;
            this.len = len;
        }

        int u8() throws TermException {
            if (pos >= len) {
                throw new TermException("Truncated", pos);
            }
            return buf[base + pos++] & 0xff;
        }

        long varint() throws TermException {
            int at = pos;
            long v = 0;
            for (int shift = 0; shift < 70; shift += 7) {
                int b = u8();
                if (shift == 63 && b > 1) {
                    throw new TermException("Varint", at);
                }
                v |= ((long) (b & 0x7f)) << shift;
                if ((b & 0x80) == 0) {
                    return v;
                }
            }
            throw new TermException("Varint", at);
        }

        int count() throws TermException {
            int at = pos;
            long n = varint();
            if (n < 0 || n > len - pos) {
                throw new TermException("Length", at);
            }
            return (int) n;
        }

        byte[] bytes() throws TermException {
            int n = count();
            byte[] b = Arrays.copyOfRange(buf, base + pos, base + pos + n);
            pos += n;
            return b;
        }

        String str() throws TermException {
            int at = pos;
            int n = count();
            try {
                CharBuffer c = StandardCharsets.UTF_8.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(buf, base + pos, n));
                pos += n;
                return c.toString();
            } catch (CharacterCodingException e) {
                throw new TermException("Utf8", at);
            }
        }
    }

    /** A growable byte buffer. */
    static final class Out {
        byte[] buf;
        int len;

        Out(int capacity) {
            buf = new byte[Math.max(16, capacity)];
        }

        void ensure(int more) {
            if (len + more > buf.length) {
                buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + more));
            }
        }

        void u8(int b) {
            ensure(1);
            buf[len++] = (byte) b;
        }

        void put(byte[] b, int off, int n) {
            ensure(n);
            System.arraycopy(b, off, buf, len, n);
            len += n;
        }

        void varint(long n) {
            do {
                int b = (int) (n & 0x7f);
                n >>>= 7;
                u8(n == 0 ? b : b | 0x80);
            } while (n != 0);
        }

        void str(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            varint(b.length);
            put(b, 0, b.length);
        }

        byte[] bytes() {
            return len == buf.length ? buf : Arrays.copyOf(buf, len);
        }
    }
}
