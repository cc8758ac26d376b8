package org.viastack.bus;

import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;

/**
 * The term text syntax (docs/BUS.md "Terms"; the grammar of the Rust arena's {@code parse},
 * crates/bus/src/term.rs {@code TextParser}): integers, reals, {@code "strings"} with the
 * escapes {@code \" \\ \n \t \r \xHH}, {@code fun(args…)}, {@code [items…]}, {@code <type>},
 * {@code #"hex"} blobs, {@code t{annos…}}, variables {@code X} and result variables
 * {@code X?}, references {@code @ref(owner,var,size,"location",sig)}; white space and
 * {@code %} comments between tokens. Errors name the line and column, as the Rust parser does.
 */
public final class TermParser {
    /** Deepest nesting accepted (the Rust parser's MAX_DEPTH). */
    public static final int MAX_DEPTH = 512;

    /** Text that is not a term: where ({@code line:col}, from 1) and why. */
    public static final class ParseException extends Exception {
        private static final long serialVersionUID = 1L;
        private final int line;
        private final int col;

        ParseException(int line, int col, String msg) {
            super(line + ":" + col + ": " + msg);
            this.line = line;
            this.col = col;
        }

        public int line() {
            return line;
        }

        public int col() {
            return col;
        }
    }

    private final String src;
    private int pos;

    private TermParser(String src) {
        this.src = src;
    }

    /** Parses one term from {@code src} (surrounding white space allowed). */
    public static Term parse(String src) throws ParseException {
        TermParser p = new TermParser(src);
        p.skipWs();
        Term t = p.term(0);
        p.skipWs();
        if (p.pos < src.length()) {
            throw p.error("expected the end of the term");
        }
        return t;
    }

    private ParseException error(String msg) {
        int line = 1;
        int lineStart = 0;
        int end = Math.min(pos, src.length());
        for (int i = 0; i < end; i++) {
            if (src.charAt(i) == '\n') {
                line++;
                lineStart = i + 1;
            }
        }
        int col = src.codePointCount(lineStart, end) + 1;
        return new ParseException(line, col, msg);
    }

    private int peek() {
        return pos < src.length() ? src.codePointAt(pos) : -1;
    }

    private int peek2() {
        if (pos >= src.length()) {
            return -1;
        }
        int next = pos + Character.charCount(src.codePointAt(pos));
        return next < src.length() ? src.codePointAt(next) : -1;
    }

    private int bump() {
        int c = peek();
        if (c >= 0) {
            pos += Character.charCount(c);
        }
        return c;
    }

    private boolean eat(int c) {
        if (peek() == c) {
            pos += Character.charCount(c);
            return true;
        }
        return false;
    }

    private void expect(char c) throws ParseException {
        skipWs();
        if (!eat(c)) {
            throw error("expected '" + c + "'");
        }
    }

    private void skipWs() {
        while (true) {
            int c = peek();
            if (c >= 0 && Character.isWhitespace(c)) {
                bump();
            } else if (c == '%') {
                while (true) {
                    int d = bump();
                    if (d < 0 || d == '\n') {
                        break;
                    }
                }
            } else {
                return;
            }
        }
    }

    private static boolean asciiAlnum(int c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    }

    private static boolean digit(int c) {
        return c >= '0' && c <= '9';
    }

    /** {@code [A-Za-z0-9_-]*} not ending in '-'. */
    private String ident() {
        int start = pos;
        while (true) {
            int c = peek();
            if (asciiAlnum(c) || c == '_' || (c == '-' && pos > start)) {
                bump();
            } else {
                break;
            }
        }
        while (pos > start && src.charAt(pos - 1) == '-') {
            pos--;
        }
        return src.substring(start, pos);
    }

    private String string() throws ParseException {
        if (!eat('"')) {
            throw error("expected '\"'");
        }
        StringBuilder s = new StringBuilder();
        while (true) {
            int c = bump();
            switch (c) {
                case -1 -> throw error("unterminated string");
                case '"' -> {
                    return s.toString();
                }
                case '\\' -> {
                    int e = bump();
                    switch (e) {
                        case '"' -> s.append('"');
                        case '\\' -> s.append('\\');
                        case 'n' -> s.append('\n');
                        case 't' -> s.append('\t');
                        case 'r' -> s.append('\r');
                        case 'x' -> {
                            int start = pos;
                            bump();
                            bump();
                            String h = pos <= src.length() ? src.substring(start, pos) : "";
                            if (h.length() != 2 || Character.digit(h.charAt(0), 16) < 0
                                    || Character.digit(h.charAt(1), 16) < 0) {
                                throw error("expected two hex digits after \\x");
                            }
                            s.append((char) Integer.parseInt(h, 16));
                        }
                        default -> throw error("unknown escape");
                    }
                }
                default -> s.appendCodePoint(c);
            }
        }
    }

    private Term number() throws ParseException {
        int start = pos;
        eat('-');
        while (digit(peek())) {
            bump();
        }
        boolean real = false;
        if (peek() == '.' && digit(peek2())) {
            real = true;
            bump();
            while (digit(peek())) {
                bump();
            }
        }
        if (peek() == 'e' || peek() == 'E') {
            real = true;
            bump();
            if (peek() == '+' || peek() == '-') {
                bump();
            }
            while (digit(peek())) {
                bump();
            }
        }
        String text = src.substring(start, pos);
        if (real) {
            try {
                // Java accepts forms Rust refuses ("1e", "-.5" cannot occur here; "1e" can).
                if (text.endsWith("e") || text.endsWith("E") || text.endsWith("+") || text.endsWith("-")) {
                    throw new NumberFormatException(text);
                }
                double d = Double.parseDouble(text);
                if (Double.isInfinite(d) || Double.isNaN(d)) {
                    throw new NumberFormatException(text);
                }
                return new Term.Real(d);
            } catch (NumberFormatException e) {
                throw error("invalid real '" + text + "'");
            }
        }
        try {
            return new Term.Int(Long.parseLong(text));
        } catch (NumberFormatException e) {
            throw error("invalid integer '" + text + "'");
        }
    }

    private List<Term> terms(char close, int depth) throws ParseException {
        List<Term> out = new ArrayList<>();
        skipWs();
        if (eat(close)) {
            return out;
        }
        while (true) {
            skipWs();
            out.add(term(depth + 1));
            skipWs();
            if (eat(close)) {
                return out;
            }
            if (!eat(',')) {
                throw error("expected ',' or '" + close + "'");
            }
        }
    }

    private long unsigned() throws ParseException {
        skipWs();
        if (!(peek() == '-' || digit(peek()))) {
            throw error("expected a non-negative integer");
        }
        Term t = number();
        if (t instanceof Term.Int i && i.value() >= 0) {
            return i.value();
        }
        throw error("expected a non-negative integer");
    }

    private Term term(int depth) throws ParseException {
        if (depth > MAX_DEPTH) {
            throw error("nesting deeper than " + MAX_DEPTH);
        }
        skipWs();
        int c = peek();
        Term t;
        if (c < 0) {
            throw error("expected a term, found the end");
        } else if (digit(c) || c == '-') {
            t = number();
        } else if (c == '"') {
            t = new Term.Str(string());
        } else if (c == '[') {
            bump();
            t = new Term.Lst(terms(']', depth));
        } else if (c == '<') {
            bump();
            Term ty = term(depth + 1);
            expect('>');
            t = new Term.Placeholder(ty);
        } else if (c == '#') {
            bump();
            String hex = string();
            byte[] bytes;
            try {
                if (hex.length() % 2 != 0) {
                    throw new IllegalArgumentException(hex);
                }
                bytes = HexFormat.of().parseHex(hex);
            } catch (IllegalArgumentException e) {
                throw error("invalid hex in blob");
            }
            t = new Term.Blob(bytes);
        } else if (c == '@') {
            bump();
            if (!ident().equals("ref")) {
                throw error("expected 'ref' after '@'");
            }
            expect('(');
            long[] nums = new long[3];
            for (int k = 0; k < 3; k++) {
                nums[k] = unsigned();
                expect(',');
            }
            skipWs();
            String location = string();
            expect(',');
            Term sig = term(depth + 1);
            expect(')');
            t = new Term.Ref(nums[0], nums[1], nums[2], location, sig);
        } else if (c >= 'A' && c <= 'Z') {
            String name = ident();
            boolean result = eat('?');
            t = new Term.Var(name, result);
        } else if (c >= 'a' && c <= 'z') {
            String fun = ident();
            List<Term> args = eat('(') ? terms(')', depth) : List.of();
            t = new Term.Appl(fun, args);
        } else {
            throw error("unexpected '" + new String(Character.toChars(c)) + "'");
        }
        if (peek() == '{') {
            bump();
            List<Term> annos = terms('}', depth);
            if (annos.isEmpty()) {
                throw error("empty annotation");
            }
            return new Term.Annot(t, annos);
        }
        return t;
    }
}
