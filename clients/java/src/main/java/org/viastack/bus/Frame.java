package org.viastack.bus;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Bus frames (docs/WIRE.md "Bus frames", seed 003's REG/PUT/GET/ACK/FIN/END and the script's
 * messages): {@code u32 LEN, u8 KIND, body}, big endian; str = u16 length + UTF-8; term = u32
 * length + term stream ({@link TermCodec}); bytes run to the end of the frame. Field names are
 * those of testdata/vectors/bus/frames.json. An unknown kind decodes to a frame with a null
 * {@link #kind()} (a newer peer's frame, skipped by the client); a malformed one throws a
 * {@link FrameException}, never anything else.
 */
public final class Frame {
    /** The handshake's protocol version. */
    public static final int VERSION = 1;
    /** The largest frame a tool accepts from the bus by default (16 MiB). */
    public static final int DEFAULT_MAX_FRAME = 16 << 20;

    /** Field types. */
    enum Ty { U8, U16, U32, U64, STR, TERM, BYTES }

    /** The frame kinds, their bytes and their fields in wire order. */
    public enum Kind {
        HELLO(0x01, "version", Ty.U16, "name", Ty.STR, "location", Ty.STR, "token", Ty.STR),
        REG(0x02, "version", Ty.U16, "tool", Ty.U64, "lease_ms", Ty.U32, "threshold", Ty.U32),
        EVAL(0x10, "request", Ty.U64, "delivery", Ty.U64, "term", Ty.TERM),
        VALUE(0x11, "request", Ty.U64, "term", Ty.TERM),
        DO(0x12, "delivery", Ty.U64, "term", Ty.TERM),
        EVENT(0x13, "event", Ty.U64, "term", Ty.TERM),
        ACK_EVENT(0x14, "event", Ty.U64, "delivery", Ty.U64, "term", Ty.TERM),
        TERMINATE(0x15, "term", Ty.TERM),
        NOTE(0x16, "term", Ty.TERM),
        GET(0x20, "delivery", Ty.U64, "var", Ty.U64, "offset", Ty.U64, "window", Ty.U32),
        PUT(0x21, "var", Ty.U64, "offset", Ty.U64, "total", Ty.U64, "data", Ty.BYTES),
        CREDIT(0x22, "var", Ty.U64, "bytes", Ty.U32),
        ACK(0x23, "delivery", Ty.U64),
        FIN(0x24, "var", Ty.U64),
        END(0x25, "reason", Ty.STR),
        FAIL(0x26, "delivery", Ty.U64, "code", Ty.U8, "detail", Ty.STR),
        PING(0x27, "nonce", Ty.U64);

        final int code;
        final String[] names;
        final Ty[] types;

        Kind(int code, Object... spec) {
            this.code = code;
            names = new String[spec.length / 2];
            types = new Ty[spec.length / 2];
            for (int i = 0; i < names.length; i++) {
                names[i] = (String) spec[2 * i];
                types[i] = (Ty) spec[2 * i + 1];
            }
        }

        /** The kind of a kind byte, or null. */
        public static Kind of(int code) {
            for (Kind k : values()) {
                if (k.code == code) {
                    return k;
                }
            }
            return null;
        }
    }

    private final Kind kind;
    private final int kindByte;
    private final Map<String, Object> fields;

    private Frame(Kind kind, int kindByte, Map<String, Object> fields) {
        this.kind = kind;
        this.kindByte = kindByte;
        this.fields = fields;
    }

    /**
     * A frame of {@code kind} from its fields in wire order: numbers as {@code long}, strings,
     * terms, and the PUT data as {@code byte[]}.
     */
    public static Frame of(Kind kind, Object... values) {
        if (values.length != kind.names.length) {
            throw new IllegalArgumentException(kind + " has " + kind.names.length + " fields");
        }
        Map<String, Object> f = new LinkedHashMap<>();
        for (int i = 0; i < values.length; i++) {
            Object v = values[i];
            Ty ty = kind.types[i];
            boolean ok = switch (ty) {
                case U8, U16, U32, U64 -> v instanceof Number;
                case STR -> v instanceof String;
                case TERM -> v instanceof Term;
                case BYTES -> v instanceof byte[];
            };
            if (!ok) {
                throw new IllegalArgumentException(kind + "." + kind.names[i] + " must be " + ty);
            }
            f.put(kind.names[i], v instanceof Number n ? Long.valueOf(n.longValue()) : v);
        }
        return new Frame(kind, kind.code, f);
    }

    /** The kind, or null for a kind this client does not know. */
    public Kind kind() {
        return kind;
    }

    /** The kind byte on the wire. */
    public int kindByte() {
        return kindByte;
    }

    /** A number field (u64 as an unsigned long). */
    public long num(String name) {
        return (Long) field(name);
    }

    /** A string field. */
    public String str(String name) {
        return (String) field(name);
    }

    /** A term field. */
    public Term term() {
        return (Term) field("term");
    }

    /** PUT's data. */
    public byte[] data() {
        return (byte[]) field("data");
    }

    private Object field(String name) {
        Object v = fields.get(name);
        if (v == null) {
            throw new IllegalArgumentException((kind == null ? "UNKNOWN" : kind) + " has no field " + name);
        }
        return v;
    }

    /**
     * The fields as the vectors spell them: kind, numbers, strings, terms as text, PUT data as
     * data_hex; an unknown frame as kind UNKNOWN, kind_byte and body_hex.
     */
    public Map<String, Object> textFields() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("kind", kind == null ? "UNKNOWN" : kind.name());
        for (Map.Entry<String, Object> e : fields.entrySet()) {
            Object v = e.getValue();
            if (v instanceof Term t) {
                out.put(e.getKey(), t.toText());
            } else if (v instanceof byte[] b) {
                out.put(kind == null ? "body_hex" : "data_hex", HexFormat.of().formatHex(b));
            } else {
                out.put(e.getKey(), v);
            }
        }
        if (kind == null) {
            out.put("kind_byte", (long) kindByte);
        }
        return out;
    }

    @Override
    public String toString() {
        return textFields().toString();
    }

    /** The frame's bytes, length included. */
    public byte[] encode() {
        if (kind == null) {
            throw new IllegalStateException("cannot encode an unknown frame");
        }
        TermCodec.Out out = new TermCodec.Out(64);
        out.put(new byte[4], 0, 4);
        out.u8(kind.code);
        for (int i = 0; i < kind.names.length; i++) {
            Object v = fields.get(kind.names[i]);
            switch (kind.types[i]) {
                case U8 -> out.u8((int) (long) (Long) v);
                case U16 -> be(out, (Long) v, 2);
                case U32 -> be(out, (Long) v, 4);
                case U64 -> be(out, (Long) v, 8);
                case STR -> {
                    byte[] b = ((String) v).getBytes(StandardCharsets.UTF_8);
                    be(out, b.length, 2);
                    out.put(b, 0, b.length);
                }
                case TERM -> {
                    byte[] b = TermCodec.encode((Term) v);
                    be(out, b.length, 4);
                    out.put(b, 0, b.length);
                }
                case BYTES -> {
                    byte[] b = (byte[]) v;
                    out.put(b, 0, b.length);
                }
            }
        }
        byte[] b = out.bytes();
        int n = b.length - 4;
        b[0] = (byte) (n >>> 24);
        b[1] = (byte) (n >>> 16);
        b[2] = (byte) (n >>> 8);
        b[3] = (byte) n;
        return b;
    }

    private static void be(TermCodec.Out out, long v, int n) {
        for (int s = 8 * (n - 1); s >= 0; s -= 8) {
            out.u8((int) (v >>> s));
        }
    }

    /**
     * The whole frame size (4 + LEN) from its first four bytes, checked against
     * {@code maxFrame}.
     */
    public static long frameLen(byte[] head, long maxFrame) throws FrameException {
        long n = ((head[0] & 0xffL) << 24) | ((head[1] & 0xff) << 16) | ((head[2] & 0xff) << 8) | (head[3] & 0xff);
        if (n == 0) {
            throw new FrameException("Empty", "LEN is zero");
        }
        if (n > maxFrame) {
            throw new FrameException("TooLarge", n + " > " + maxFrame);
        }
        return 4 + n;
    }

    /** Decodes exactly one whole frame (length included). */
    public static Frame decode(byte[] buf, long maxFrame) throws FrameException {
        if (buf.length < 4) {
            throw new FrameException("Truncated", "frame");
        }
        long total = frameLen(buf, maxFrame);
        if (total > buf.length) {
            throw new FrameException("Truncated", "frame");
        }
        if (total < buf.length) {
            throw new FrameException("Trailing", "frame");
        }
        return decodeBody(buf[4] & 0xff, buf, 5, buf.length);
    }

    /** Decodes a body {@code buf[from..to)} of kind byte {@code code}. */
    static Frame decodeBody(int code, byte[] buf, int from, int to) throws FrameException {
        Kind kind = Kind.of(code);
        Map<String, Object> f = new LinkedHashMap<>();
        if (kind == null) {
            f.put("body", Arrays.copyOfRange(buf, from, to));
            return new Frame(null, code, f);
        }
        int pos = from;
        for (int i = 0; i < kind.names.length; i++) {
            String name = kind.names[i];
            switch (kind.types[i]) {
                case U8 -> {
                    need(kind, name, pos, 1, to);
                    f.put(name, (long) (buf[pos] & 0xff));
                    pos += 1;
                }
                case U16 -> {
                    f.put(name, get(kind, name, buf, pos, 2, to));
                    pos += 2;
                }
                case U32 -> {
                    f.put(name, get(kind, name, buf, pos, 4, to));
                    pos += 4;
                }
                case U64 -> {
                    f.put(name, get(kind, name, buf, pos, 8, to));
                    pos += 8;
                }
                case STR -> {
                    int n = (int) get(kind, name, buf, pos, 2, to);
                    pos += 2;
                    need(kind, name, pos, n, to);
                    try {
                        f.put(name, StandardCharsets.UTF_8.newDecoder()
                                .onMalformedInput(CodingErrorAction.REPORT)
                                .onUnmappableCharacter(CodingErrorAction.REPORT)
                                .decode(ByteBuffer.wrap(buf, pos, n)).toString());
                    } catch (CharacterCodingException e) {
                        throw new FrameException("Utf8", kind + " " + name);
                    }
                    pos += n;
                }
                case TERM -> {
                    long n = get(kind, "term", buf, pos, 4, to);
                    pos += 4;
                    need(kind, "term", pos, n, to);
                    try {
                        f.put(name, TermCodec.decode(buf, pos, (int) n, true));
                    } catch (TermException e) {
                        throw new FrameException("Term", kind + ": " + e.getMessage());
                    }
                    pos += (int) n;
                }
                case BYTES -> {
                    f.put(name, Arrays.copyOfRange(buf, pos, to));
                    pos = to;
                }
            }
        }
        if (pos != to) {
            throw new FrameException("Trailing", kind + ": " + (to - pos) + " bytes");
        }
        return new Frame(kind, code, f);
    }

    private static void need(Kind kind, String field, int pos, long n, int to) throws FrameException {
        if (pos + n > to) {
            throw new FrameException("Truncated", kind + " " + field);
        }
    }

    private static long get(Kind kind, String field, byte[] buf, int pos, int n, int to) throws FrameException {
        need(kind, field, pos, n, to);
        long v = 0;
        for (int i = 0; i < n; i++) {
            v = (v << 8) | (buf[pos + i] & 0xff);
        }
        return v;
    }
}
