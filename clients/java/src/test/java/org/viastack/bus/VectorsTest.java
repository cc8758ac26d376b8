package org.viastack.bus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The bus vectors in testdata/vectors/bus/ (shared with the Rust and Python clients) decoded
 * and re-encoded byte for byte by the Java client, and malformed input refused with the
 * variant the Rust decoder names.
 */
class VectorsTest {
    static final Path VECTORS = Path.of("..", "..", "testdata", "vectors", "bus");

    @SuppressWarnings("unchecked")
    static List<Map<String, Object>> load(String name) throws IOException {
        Map<String, Object> doc = (Map<String, Object>) Json.parse(Files.readString(VECTORS.resolve(name)));
        return (List<Map<String, Object>>) doc.get("vectors");
    }

    static byte[] hex(Object s) {
        return HexFormat.of().parseHex((String) s);
    }

    /** JSON numbers and Java longs (u64 as unsigned) compared as decimal strings. */
    static Map<String, String> canon(Map<String, Object> m) {
        Map<String, String> out = new LinkedHashMap<>();
        for (Map.Entry<String, Object> e : m.entrySet()) {
            Object v = e.getValue();
            out.put(e.getKey(), v instanceof Long l ? Long.toUnsignedString(l)
                    : v instanceof BigInteger b ? b.toString() : (String) v);
        }
        return out;
    }

    /**
     * A Rust owner's location with its same-host part: the Java client (which cannot receive a
     * memfd: the JDK has no SCM_RIGHTS) fetches at the base, TCP or TLS.
     */
    @Test
    void sameHostPartOfALocationIsSplitOff() {
        assertEquals("127.0.0.1:5", Tool.baseLocation("127.0.0.1:5;local=abc@/tmp/x.sock"));
        assertEquals("tls:h:5;sha256=00ff", Tool.baseLocation("tls:h:5;sha256=00ff;local=abc@/s"));
        assertEquals("127.0.0.1:5", Tool.baseLocation("127.0.0.1:5"));
    }

    @Test
    @SuppressWarnings("unchecked")
    void validFramesDecodeToTheirFieldsAndReencode() throws Exception {
        List<Map<String, Object>> vectors = load("frames.json");
        assertTrue(vectors.size() >= 18, "frames.json has " + vectors.size() + " vectors");
        for (Map<String, Object> v : vectors) {
            byte[] data = hex(v.get("hex"));
            Frame f = Frame.decode(data, Frame.DEFAULT_MAX_FRAME);
            assertEquals(canon((Map<String, Object>) v.get("fields")), canon(f.textFields()), (String) v.get("name"));
            if (f.kind() != null) {
                assertArrayEquals(data, f.encode(), (String) v.get("name"));
            }
        }
    }

    @Test
    void invalidFramesAreRefusedWithTheirVariant() throws Exception {
        List<Map<String, Object>> vectors = load("invalid.json");
        assertTrue(vectors.size() >= 7);
        for (Map<String, Object> v : vectors) {
            String variant = ((String) v.get("error")).split(" ")[0].split("\\(")[0];
            FrameException e = assertThrows(FrameException.class,
                    () -> Frame.decode(hex(v.get("hex")), Frame.DEFAULT_MAX_FRAME), (String) v.get("name"));
            assertEquals(variant, e.variant(), (String) v.get("name"));
        }
    }

    @Test
    void termStreamsRoundTrip() throws Exception {
        List<Map<String, Object>> vectors = load("terms.json");
        assertTrue(vectors.size() >= 10);
        for (Map<String, Object> v : vectors) {
            byte[] data = hex(v.get("hex"));
            Term t = TermCodec.decode(data);
            assertEquals(v.get("text"), t.toText(), (String) v.get("name"));
            assertArrayEquals(data, TermCodec.encode(t), (String) v.get("name"));
        }
    }

    /** The text of every term vector parses to the term whose stream is the vector's bytes. */
    @Test
    void termTextsParseToTheVectorsTerms() throws Exception {
        List<Map<String, Object>> vectors = load("terms.json");
        for (Map<String, Object> v : vectors) {
            String text = (String) v.get("text");
            Term t = TermParser.parse(text);
            assertEquals(TermCodec.decode(hex(v.get("hex"))), t, (String) v.get("name"));
            assertArrayEquals(hex(v.get("hex")), TermCodec.encode(t), (String) v.get("name"));
            assertEquals(text, t.toText(), (String) v.get("name"));
            // White space and comments between tokens do not change the term.
            assertEquals(t, TermParser.parse("  % a comment\n " + text + "\n\t"), (String) v.get("name"));
        }
    }

    @Test
    void termTextErrorsNameTheLineAndColumn() {
        String[][] bad = {
            {"f(1,", "1:5", "expected a term, found the end"},
            {"f(1 2)", "1:5", "expected ',' or ')'"},
            {"\"abc", "1:5", "unterminated string"},
            {"\"a\\q\"", "1:5", "unknown escape"},
            {"#\"0\"", "1:5", "invalid hex in blob"},
            {"t{}", "1:4", "empty annotation"},
            {"f(\n  @foo(1))", "2:7", "expected 'ref' after '@'"},
            {"@ref(-1,1,1,\"\",x)", "1:8", "expected a non-negative integer"},
            {"99999999999999999999", "1:21", "invalid integer"},
            {"f(x) g", "1:6", "expected the end of the term"},
            {"$", "1:1", "unexpected '$'"},
        };
        for (String[] b : bad) {
            TermParser.ParseException e = assertThrows(TermParser.ParseException.class,
                    () -> TermParser.parse(b[0]), b[0]);
            assertEquals(b[1], e.line() + ":" + e.col(), b[0] + ": " + e.getMessage());
            assertTrue(e.getMessage().contains(b[2]), b[0] + ": " + e.getMessage());
        }
        String deep = "[".repeat(600) + "]".repeat(600);
        TermParser.ParseException e = assertThrows(TermParser.ParseException.class, () -> TermParser.parse(deep));
        assertTrue(e.getMessage().contains("nesting deeper"), e.getMessage());
    }

    /** Damaged texts fail with a ParseException, never another exception. */
    @Test
    void damagedTextNeverEscapesAsAnUntypedException() throws Exception {
        Random rng = new Random(3);
        String alphabet = "()[]<>{},?@#\"\\%-.e0123456789abXYref \n";
        for (Map<String, Object> v : load("terms.json")) {
            String text = (String) v.get("text");
            for (int cut = 0; cut < text.length(); cut++) {
                try {
                    TermParser.parse(text.substring(0, cut));
                } catch (TermParser.ParseException expected) {
                    // typed
                }
            }
            for (int round = 0; round < 300; round++) {
                StringBuilder b = new StringBuilder(text);
                for (int k = 0; k <= rng.nextInt(3); k++) {
                    b.setCharAt(rng.nextInt(b.length()), alphabet.charAt(rng.nextInt(alphabet.length())));
                }
                try {
                    TermParser.parse(b.toString());
                } catch (TermParser.ParseException expected) {
                    // typed
                }
            }
        }
    }

    @Test
    void sharedSubtermsAreWrittenOnceAndComeBackEqual() throws Exception {
        Term g = Term.appl("g", Term.blob(new byte[1000]));
        Term t = Term.list(g, g, g, g);
        byte[] data = TermCodec.encode(t);
        assertTrue(data.length < 1100, "sharing kept: " + data.length + " bytes");
        assertEquals(t, TermCodec.decode(data));
    }

    @Test
    void realsPrintAsRustDoes() {
        assertEquals("2.5", Term.real(2.5).toText());
        assertEquals("1.0", Term.real(1).toText());
        assertEquals("-0.001", Term.real(-0.001).toText());
        assertEquals("0.0001", Term.real(0.0001).toText());
        assertEquals("1e-5", Term.real(0.00001).toText());
        assertEquals("1e20", Term.real(1e20).toText());
        assertEquals("1.5e16", Term.real(1.5e16).toText());
        assertEquals("1234567.0", Term.real(1234567).toText());
    }

    /** Every truncation and random corruption of valid frames and terms fails typed, never otherwise. */
    @Test
    void damagedInputNeverEscapesAsAnUntypedException() throws Exception {
        List<byte[]> seeds = new ArrayList<>();
        for (Map<String, Object> v : load("frames.json")) {
            seeds.add(hex(v.get("hex")));
        }
        Random rng = new Random(19);
        int refused = 0;
        for (byte[] seed : seeds) {
            for (int cut = 0; cut < seed.length; cut++) {
                byte[] b = java.util.Arrays.copyOf(seed, cut);
                assertThrows(FrameException.class, () -> Frame.decode(b, Frame.DEFAULT_MAX_FRAME));
                refused++;
            }
            for (int round = 0; round < 200; round++) {
                byte[] b = seed.clone();
                for (int k = 0; k <= rng.nextInt(3); k++) {
                    b[rng.nextInt(b.length)] = (byte) rng.nextInt(256);
                }
                try {
                    Frame.decode(b, Frame.DEFAULT_MAX_FRAME);
                } catch (FrameException e) {
                    refused++;
                }
                byte[] body = java.util.Arrays.copyOfRange(b, Math.min(5, b.length), b.length);
                try {
                    TermCodec.decode(body, 0, body.length, false);
                } catch (TermException e) {
                    refused++;
                }
            }
        }
        assertTrue(refused > seeds.size() * 100, "refused " + refused);
    }
}
