package org.viastack.bus;

/**
 * A frame that does not decode: {@link #variant()} names the Rust decoder's error (Empty,
 * TooLarge, Truncated, Trailing, Utf8, Term).
 */
public final class FrameException extends Exception {
    private static final long serialVersionUID = 1L;
    private final String variant;

    public FrameException(String variant, String detail) {
        super(variant + ": " + detail);
        this.variant = variant;
    }

    public String variant() {
        return variant;
    }
}
