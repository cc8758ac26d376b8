package org.viastack.bus;

import java.io.IOException;

/** The bus refused the handshake, sent END, or closed the connection. */
public final class BusClosedException extends IOException {
    private static final long serialVersionUID = 1L;

    public BusClosedException(String reason) {
        super("bus ended the connection: " + reason);
    }
}
