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
