package org.viastack.bus;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;

/**
 * Bus terms (docs/BUS.md "Terms", seed 003): integers, reals, strings, applications, lists,
 * placeholders, blobs, annotations, variables and references. Terms are immutable values with
 * structural equality, so equal subterms are found by a hash map: {@link TermCodec} writes a
 * subterm met again as a back reference, byte for byte as the Rust arena (maximal sharing) does.
 * {@link #toText()} is the text syntax of the Rust and Python clients.
 */
public sealed interface Term {

    /** The text form (as the Rust arena prints it). */
    String toText();

    /** Children in encoding order (pre-order streams of docs/WIRE.md). */
    default List<Term> children() {
        return List.of();
    }

    /** A 64-bit integer. */
    record Int(long value) implements Term {
        public String toText() {
            return Long.toString(value);
        }
    }

    /** A 64-bit IEEE real, compared by its bits. */
    record Real(double value) implements Term {
        public String toText() {
            return realText(value);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof Real r
                    && Double.doubleToRawLongBits(r.value) == Double.doubleToRawLongBits(value);
        }

        @Override
        public int hashCode() {
            return Long.hashCode(Double.doubleToRawLongBits(value));
        }
    }

    /** A string. */
    record Str(String value) implements Term {
        public String toText() {
            return quote(value);
        }
    }

    /** {@code fun(args…)}; {@code fun} alone when there are no arguments. */
    record Appl(String fun, List<Term> args) implements Term {
        public Appl {
            args = List.copyOf(args);
        }

        public String toText() {
            return args.isEmpty() ? fun : fun + "(" + join(args) + ")";
        }

        @Override
        public List<Term> children() {
            return args;
        }
    }

    /** {@code [items…]}. */
    record Lst(List<Term> items) implements Term {
        public Lst {
            items = List.copyOf(items);
        }

        public String toText() {
            return "[" + join(items) + "]";
        }

        @Override
        public List<Term> children() {
            return items;
        }
    }

    /** {@code <type>}: matches any value of a type. */
    record Placeholder(Term type) implements Term {
        public String toText() {
            return "<" + type.toText() + ">";
        }

        @Override
        public List<Term> children() {
            return List.of(type);
        }
    }

    /** Opaque bytes (not copied: the caller must not change the array afterwards). */
    final class Blob implements Term {
        private final byte[] data;
        private int hash;

        public Blob(byte[] data) {
            this.data = data;
        }

        /** The bytes themselves (not a copy). */
        public byte[] data() {
            return data;
        }

        public String toText() {
            return "#\"" + HexFormat.of().formatHex(data) + "\"";
        }

        @Override
        public boolean equals(Object o) {
            return o == this || (o instanceof Blob b && Arrays.equals(b.data, data));
        }

        @Override
        public int hashCode() {
            int h = hash;
            if (h == 0) {
                h = Arrays.hashCode(data) | 1;
                hash = h;
            }
            return h;
        }

        @Override
        public String toString() {
            return "Blob[" + data.length + " bytes]";
        }
    }

    /** {@code t{annos…}}: a term with at least one annotation. */
    record Annot(Term term, List<Term> annos) implements Term {
        public Annot {
            annos = List.copyOf(annos);
        }

        public String toText() {
            return term.toText() + "{" + join(annos) + "}";
        }

        @Override
        public List<Term> children() {
            List<Term> out = new ArrayList<>(annos.size() + 1);
            out.add(term);
            out.addAll(annos);
            return out;
        }
    }

    /** A variable {@code X}, or a result variable {@code X?}. */
    record Var(String name, boolean result) implements Term {
        public String toText() {
            return result ? name + "?" : name;
        }
    }

    /**
     * A value held by tool {@code owner} as its variable {@code var}: {@code size} bytes of term
     * stream to fetch at {@code location}; {@code sig} is its shape (blobs as placeholders).
     */
    record Ref(long owner, long var, long size, String location, Term sig) implements Term {
        public String toText() {
            return "@ref(" + Long.toUnsignedString(owner) + "," + Long.toUnsignedString(var) + ","
                    + Long.toUnsignedString(size) + "," + quote(location) + "," + sig.toText() + ")";
        }

        @Override
        public List<Term> children() {
            return List.of(sig);
        }
    }

    // Constructors, as in the Python client.

    static Term integer(long n) {
        return new Int(n);
    }

    static Term real(double x) {
        return new Real(x);
    }

    static Term string(String s) {
        return new Str(s);
    }

    static Term appl(String fun, Term... args) {
        return new Appl(fun, List.of(args));
    }

    static Term list(Term... items) {
        return new Lst(List.of(items));
    }

    static Term placeholder(String type) {
        return new Placeholder(appl(type));
    }

    static Term blob(byte[] data) {
        return new Blob(data);
    }

    static Term var(String name, boolean result) {
        return new Var(name, result);
    }

    private static String join(List<Term> ts) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < ts.size(); i++) {
            if (i > 0) {
                b.append(',');
            }
            b.append(ts.get(i).toText());
        }
        return b.toString();
    }

    /** A quoted string with the escapes of the Rust text form. */
    static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\t' -> b.append("\\t");
                case '\r' -> b.append("\\r");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\x%02x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.append('"').toString();
    }

    /**
     * Rust's {@code {:?}} for f64: shortest round-trip digits, "1.0" for integral values,
     * "1e20" / "1e-5" exponents outside [1e-4, 1e16).
     */
    static String realText(double x) {
        if (Double.isNaN(x)) {
            return "NaN";
        }
        if (Double.isInfinite(x)) {
            return x > 0 ? "inf" : "-inf";
        }
        if (x == 0) {
            return (1 / x < 0) ? "-0.0" : "0.0";
        }
        BigDecimal d = new BigDecimal(Double.toString(x)).stripTrailingZeros();
        String sign = d.signum() < 0 ? "-" : "";
        String digits = d.unscaledValue().abs().toString();
        int exp = digits.length() - 1 - d.scale(); // x = d.ddd × 10^exp
        if (exp < -4 || exp >= 16) {
            String mant = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
            return sign + mant + "e" + exp;
        }
        return sign + d.abs().toPlainString() + (d.scale() <= 0 ? ".0" : "");
    }
}
