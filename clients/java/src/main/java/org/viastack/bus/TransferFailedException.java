package org.viastack.bus;

import java.io.IOException;

/**
 * A reference could not be fetched: {@link #code()} is the FAIL code (1 owner lost, 2 relay
 * refused, 3 unknown variable, …; 0 when the owner broke the protocol or is unreachable).
 */
public class TransferFailedException extends IOException {
    private static final long serialVersionUID = 1L;
    private final int code;

    public TransferFailedException(int code, String detail) {
        super("transfer failed (code " + code + "): " + detail);
        this.code = code;
    }

    public int code() {
        return code;
    }
}
