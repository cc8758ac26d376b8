package org.viastack.bus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.util.Base64;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Java tools on a TLS bus ({@code viastack bus serve --tls-cert/--tls-key}, $VIASTACK_BIN):
 * the tool verifies the bus's certificate against a PEM root and a name (a wrong root or name
 * is refused with {@link BusUnverifiedException}); the producer's listener serves TLS with a
 * throwaway keytool certificate and announces {@code tls:HOST:PORT;sha256=FP}; the consumer
 * fetches the 3 MB value over TLS pinned to that fingerprint, and refuses (and counts) a
 * reference to the same listener with another pin, or a plain TCP location.
 */
class BusTlsTest {

    /**
     * A self-signed certificate for "localhost" made by keytool, written as PEM cert and key.
     * RSA: the bus's rustls (ring) reads an EC PKCS#8 key only with its public key inside, which
     * the JDK's encoding leaves out; {@code bus serve} refuses such a key with
     * {@code TlsKeyError::EcKeyWithoutPublicKey}, naming the fix ({@code openssl ec -in key -out key}
     * rewrites it with the public key; crates/bus/tests/tls_keys.rs).
     */
    static Path[] busCertificate(Path dir, String name) throws Exception {
        Path ks = dir.resolve(name + ".p12");
        String keytool = Path.of(System.getProperty("java.home"), "bin", "keytool").toString();
        Process p = new ProcessBuilder(keytool, "-genkeypair", "-alias", "bus", "-keyalg", "RSA", "-keysize",
                "2048", "-dname", "CN=localhost", "-ext", "SAN=dns:localhost,ip:127.0.0.1", "-validity", "2",
                "-storetype", "PKCS12", "-keystore", ks.toString(), "-storepass", "changeit")
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0, "keytool failed");
        KeyStore store = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(ks)) {
            store.load(in, "changeit".toCharArray());
        }
        Path cert = dir.resolve(name + ".pem");
        Path key = dir.resolve(name + ".key");
        Files.writeString(cert, pem("CERTIFICATE", store.getCertificate("bus").getEncoded()));
        Files.writeString(key, pem("PRIVATE KEY", store.getKey("bus", "changeit".toCharArray()).getEncoded()));
        return new Path[] {cert, key};
    }

    static String pem(String label, byte[] der) {
        return "-----BEGIN " + label + "-----\n"
                + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII)).encodeToString(der)
                + "\n-----END " + label + "-----\n";
    }

    static Process startTlsBus(Path dir, Path[] cert) throws Exception {
        Path script = dir.resolve("pipe.tb");
        Files.writeString(script, BusServeTest.SCRIPT);
        return new ProcessBuilder(BusServeTest.binary(), "bus", "serve", "--listen", "127.0.0.1:0", "--token",
                "s3cret", "--tls-cert", cert[0].toString(), "--tls-key", cert[1].toString(), script.toString())
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
    }

    static Tool.Config config(String name, Path ca) {
        Tool.Config c = new Tool.Config(name);
        c.token = "s3cret";
        c.tlsCa = ca;
        return c;
    }

    @Test
    void aValueGoesByReferenceOverTlsFromAPinnedOwner(@TempDir Path dir) throws Exception {
        BusServeTest.binary();
        Path[] cert = busCertificate(dir, "bus");
        Process bus = startTlsBus(dir, cert);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try {
            String addr = BusServeTest.address(bus);
            byte[] payload = BusServeTest.pattern(3_000_000);
            Future<Object[]> producer = pool.submit(() -> {
                Tool.Config c = config("producer", cert[0]);
                c.chunk = 64 * 1024;
                try (Tool t = Tool.connect(addr, c)) {
                    Term sent = null;
                    while (true) {
                        Frame f = t.nextRequest();
                        switch (f.kind()) {
                            case EVAL -> {
                                sent = t.put(Term.appl("data", Term.string("big"), Term.blob(payload)));
                                t.value(f.num("request"), sent);
                            }
                            case TERMINATE -> {
                                return new Object[] {sent, t.location(), t.held()};
                            }
                            default -> { }
                        }
                    }
                }
            });
            Future<Object[]> consumer = pool.submit(() -> {
                Tool.Config c = config("consumer", cert[0]);
                c.window = 512 * 1024;
                try (Tool t = Tool.connect(addr, c)) {
                    byte[] got = null;
                    String forgedError = null;
                    String plainError = null;
                    while (true) {
                        Frame f = t.nextRequest();
                        switch (f.kind()) {
                            case EVAL -> {
                                Term.Ref ref = (Term.Ref) ((Term.Appl) f.term()).args().get(0);
                                if (got == null) {
                                    // The same listener under another pin: refused before any byte.
                                    String loc = ref.location();
                                    char last = loc.charAt(loc.length() - 1);
                                    String forged = loc.substring(0, loc.length() - 1) + (last == '0' ? '1' : '0');
                                    OwnerUnverifiedException e = assertThrows(OwnerUnverifiedException.class,
                                            () -> t.resolve(new Term.Ref(ref.owner(), ref.var(), ref.size(), forged,
                                                    ref.sig()), 0));
                                    forgedError = e.getMessage();
                                    // Its bare address: plain TCP on a TLS bus is refused.
                                    String plain = loc.substring(4, loc.indexOf(';'));
                                    e = assertThrows(OwnerUnverifiedException.class,
                                            () -> t.resolve(new Term.Ref(ref.owner(), ref.var(), ref.size(), plain,
                                                    ref.sig()), 0));
                                    plainError = e.getMessage();
                                }
                                Term v = t.resolve(f.term(), f.num("delivery"));
                                Term.Appl data = (Term.Appl) ((Term.Appl) v).args().get(0);
                                got = ((Term.Blob) data.args().get(1)).data();
                                t.value(f.num("request"), Term.appl("ok"));
                            }
                            case TERMINATE -> {
                                return new Object[] {got, t.fetches(), t.tlsFetches(), t.unverifiedOwners(),
                                    forgedError, plainError};
                            }
                            default -> { }
                        }
                    }
                }
            });
            Object[] c = consumer.get(90, TimeUnit.SECONDS);
            Object[] p = producer.get(90, TimeUnit.SECONDS);
            assertTrue(bus.waitFor(60, TimeUnit.SECONDS), "the bus ends when the script does");
            assertEquals(0, bus.exitValue());

            String location = (String) p[1];
            assertTrue(location.matches("tls:127\\.0\\.0\\.1:[0-9]+;sha256=[0-9a-f]{64}"), location);
            Term.Ref ref = assertInstanceOf(Term.Ref.class, p[0], "3 MB goes by reference");
            assertEquals(location, ref.location(), "the reference names the owner's pinned TLS listener");
            assertArrayEquals(payload, (byte[]) c[0]);
            assertEquals(1, c[1], "fetched once");
            assertEquals(1, c[2], "over TLS");
            assertEquals(2, c[3], "the forged pin and the plain address were refused and counted");
            assertTrue(((String) c[4]).contains("handshake failed"), (String) c[4]);
            assertTrue(((String) c[5]).contains("plain TCP"), (String) c[5]);
            assertEquals(0, p[2], "FIN freed the value");
        } finally {
            pool.shutdownNow();
            bus.destroyForcibly();
        }
    }

    @Test
    void aBusWhoseCertificateIsNotTrustedOrNamedIsRefused(@TempDir Path dir) throws Exception {
        BusServeTest.binary();
        Path[] cert = busCertificate(dir, "bus");
        Path[] other = busCertificate(dir, "other");
        Process bus = startTlsBus(dir, cert);
        try {
            String addr = BusServeTest.address(bus);
            BusUnverifiedException e = assertThrows(BusUnverifiedException.class,
                    () -> Tool.connect(addr, config("producer", other[0])));
            assertTrue(e.getMessage().contains("refused"), e.getMessage());
            Tool.Config named = config("producer", cert[0]);
            named.tlsName = "bus.example.org";
            assertThrows(BusUnverifiedException.class, () -> Tool.connect(addr, named));
            // The right root and name: registered.
            try (Tool t = Tool.connect(addr, config("producer", cert[0]))) {
                assertTrue(t.id() > 0);
                assertTrue(t.location().startsWith("tls:"), t.location());
            }
        } finally {
            bus.destroyForcibly();
        }
    }
}
