package org.viastack.bus;

/**
 * A reference's owner is not the one the bus vouched for (docs/BUS.md "TLS on the owners'
 * listeners"): its certificate does not match the pinned fingerprint of the reference's
 * {@code tls:HOST:PORT;sha256=FP} location, the location is malformed, or the owner serves plain
 * TCP while this tool is on a TLS bus. Nothing was fetched; {@link Tool#unverifiedOwners()}
 * counts these refusals.
 */
public final class OwnerUnverifiedException extends TransferFailedException {
    private static final long serialVersionUID = 1L;
    private final String location;

    public OwnerUnverifiedException(String location, String detail) {
        super(0, location + ": " + detail);
        this.location = location;
    }

    /** The reference's location. */
    public String location() {
        return location;
    }
}
