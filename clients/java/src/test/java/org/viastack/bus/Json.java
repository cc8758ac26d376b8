package org.viastack.bus;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A minimal JSON reader for the test vectors: objects, arrays, strings, integers, booleans, null. */
final class Json {
    private final String s;
    private int pos;

    private Json(String s) {
        this.s = s;
    }

    static Object parse(String s) {
        Json j = new Json(s);
        Object v = j.value();
        j.ws();
        if (j.pos != s.length()) {
            throw new IllegalArgumentException("trailing JSON at " + j.pos);
        }
        return v;
    }

    private void ws() {
        while (pos < s.length() && Character.isWhitespace(s.charAt(pos))) {
            pos++;
        }
    }

    private Object value() {
        ws();
        char c = s.charAt(pos);
        if (c == '{') {
            pos++;
            Map<String, Object> m = new LinkedHashMap<>();
            ws();
            if (s.charAt(pos) == '}') {
                pos++;
                return m;
            }
            while (true) {
                ws();
                String k = string();
                ws();
                expect(':');
                m.put(k, value());
                ws();
                if (s.charAt(pos++) == '}') {
                    return m;
                }
            }
        }
        if (c == '[') {
            pos++;
            List<Object> l = new ArrayList<>();
            ws();
            if (s.charAt(pos) == ']') {
                pos++;
                return l;
            }
            while (true) {
                l.add(value());
                ws();
                if (s.charAt(pos++) == ']') {
                    return l;
                }
            }
        }
        if (c == '"') {
            return string();
        }
        if (s.startsWith("true", pos)) {
            pos += 4;
            return true;
        }
        if (s.startsWith("false", pos)) {
            pos += 5;
            return false;
        }
        if (s.startsWith("null", pos)) {
            pos += 4;
            return null;
        }
        int start = pos;
        while (pos < s.length() && "-0123456789".indexOf(s.charAt(pos)) >= 0) {
            pos++;
        }
        return new BigInteger(s.substring(start, pos));
    }

    private void expect(char c) {
        if (s.charAt(pos++) != c) {
            throw new IllegalArgumentException("expected " + c + " at " + (pos - 1));
        }
    }

    private String string() {
        expect('"');
        StringBuilder b = new StringBuilder();
        while (true) {
            char c = s.charAt(pos++);
            if (c == '"') {
                return b.toString();
            }
            if (c != '\\') {
                b.append(c);
                continue;
            }
            char e = s.charAt(pos++);
            switch (e) {
                case 'n' -> b.append('\n');
                case 't' -> b.append('\t');
                case 'r' -> b.append('\r');
                case 'b' -> b.append('\b');
                case 'f' -> b.append('\f');
                case 'u' -> {
                    b.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
                    pos += 4;
                }
                default -> b.append(e);
            }
        }
    }
}
