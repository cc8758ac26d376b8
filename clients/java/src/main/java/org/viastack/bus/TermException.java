package org.viastack.bus;

/**
 * A term stream that does not decode: {@link #variant()} names the Rust decoder's error
 * (Magic, Truncated, Varint, Length, Utf8, BackRef, Tag, Field, Depth, Trailing), {@link #at()}
 * the byte where it was found.
 */
public final class TermException extends Exception {
    private static final long serialVersionUID = 1L;
    private final String variant;
    private final int at;

    public TermException(String variant, int at) {
        super(variant + " at byte " + at);
        this.variant = variant;
        this.at = at;
    }

    public String variant() {
        return variant;
    }

    public int at() {
        return at;
    }
}
