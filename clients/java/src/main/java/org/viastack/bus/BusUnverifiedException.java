package org.viastack.bus;

import java.io.IOException;

/**
 * The bus's TLS certificate was refused (docs/BUS.md "TLS"): it is not signed by the roots of
 * {@link Tool.Config#tlsCa}, or does not carry {@link Tool.Config#tlsName}. The tool did not
 * register.
 */
public final class BusUnverifiedException extends IOException {
    private static final long serialVersionUID = 1L;

    public BusUnverifiedException(String detail, Throwable cause) {
        super(detail, cause);
    }
}
