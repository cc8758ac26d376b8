package org.viastack.bus;

import java.io.IOException;
import java.io.InputStream;
import java.net.Socket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.security.cert.CertificateException;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.concurrent.TimeUnit;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.TrustManager;
import javax.net.ssl.TrustManagerFactory;
import javax.net.ssl.X509ExtendedTrustManager;

/**
 * TLS for a Java tool, as the Rust (crates/bus/src/net.rs, owner_tls.rs) and Python clients do
 * it (docs/BUS.md "TLS", "TLS on the owners' listeners"; issue 19 §3):
 * <ul>
 * <li>to the bus: the bus's certificate must chain to the PEM roots the tool was given (a CA,
 * or the bus's own self-signed certificate) and carry the expected name;</li>
 * <li>an owner's listener on a TLS bus serves TLS with a throwaway self-signed certificate
 * (ECDSA P-256, made at run time by the JDK's {@code keytool}, which every JDK ships; the JDK
 * has no public API to make a certificate) or a given PKCS#12 key store, and announces
 * {@code tls:HOST:PORT;sha256=FP} in HELLO;</li>
 * <li>a consumer accepts exactly the certificate a reference pins (its DER's SHA-256); the
 * handshake's signature is checked by JSSE with that certificate's key.</li>
 * </ul>
 */
final class Tls {
    /** The location prefix of an owner serving over TLS. */
    static final String PREFIX = "tls:";
    /** What separates the address from the fingerprint in a location. */
    static final String PIN = ";sha256=";

    private Tls() {
    }

    /** SHA-256 of {@code der}. */
    static byte[] sha256(byte[] der) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(der);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }

    /** A client context trusting the certificates of the PEM file {@code caPem}. */
    static SSLContext busClient(Path caPem) throws IOException {
        try (InputStream in = Files.newInputStream(caPem)) {
            KeyStore roots = KeyStore.getInstance(KeyStore.getDefaultType());
            roots.load(null, null);
            int i = 0;
            for (Certificate c : CertificateFactory.getInstance("X.509").generateCertificates(in)) {
                roots.setCertificateEntry("root" + i++, c);
            }
            if (i == 0) {
                throw new IOException(caPem + ": no certificate");
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(roots);
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(null, tmf.getTrustManagers(), null);
            return ctx;
        } catch (GeneralSecurityException e) {
            throw new IOException(caPem + ": " + e.getMessage(), e);
        }
    }

    /** A client context accepting exactly the certificate whose SHA-256 is {@code pin}. */
    static SSLContext pinned(byte[] pin) throws IOException {
        try {
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(null, new TrustManager[] {new Pinned(pin)}, null);
            return ctx;
        } catch (GeneralSecurityException e) {
            throw new IOException(e.getMessage(), e);
        }
    }

    /** (address, fingerprint) of a {@code tls:ADDR;sha256=HEX} location, or null. */
    static Object[] parseLocation(String location) {
        if (!location.startsWith(PREFIX)) {
            return null;
        }
        int at = location.lastIndexOf(PIN);
        if (at < PREFIX.length()) {
            return null;
        }
        String hex = location.substring(at + PIN.length());
        if (hex.length() != 64) {
            return null;
        }
        try {
            return new Object[] {location.substring(PREFIX.length(), at), HexFormat.of().parseHex(hex)};
        } catch (IllegalArgumentException e) {
            return null;
        }
    }

    /** The certificate and key an owner serves its values with. */
    record Identity(SSLContext server, byte[] fingerprint) {
        String location(String addr) {
            return PREFIX + addr + PIN + HexFormat.of().formatHex(fingerprint);
        }
    }

    /** The identity in a PKCS#12 key store (its first key entry is served and pinned). */
    static Identity load(Path keyStore, char[] password) throws IOException {
        try (InputStream in = Files.newInputStream(keyStore)) {
            KeyStore ks = KeyStore.getInstance("PKCS12");
            ks.load(in, password);
            String alias = null;
            for (String a : java.util.Collections.list(ks.aliases())) {
                if (ks.isKeyEntry(a)) {
                    alias = a;
                    break;
                }
            }
            if (alias == null) {
                throw new IOException(keyStore + ": no key entry");
            }
            KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(ks, password);
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(kmf.getKeyManagers(), null, null);
            return new Identity(ctx, sha256(ks.getCertificate(alias).getEncoded()));
        } catch (GeneralSecurityException e) {
            throw new IOException(keyStore + ": " + e.getMessage(), e);
        }
    }

    /**
     * A fresh self-signed certificate (ECDSA P-256, CN=viastack-bus-owner) made by the JDK's
     * keytool in a temporary directory, loaded, and deleted.
     */
    static Identity generate() throws IOException {
        Path dir = Files.createTempDirectory("viastack-bus-owner");
        Path ks = dir.resolve("owner.p12");
        byte[] raw = new byte[18];
        new SecureRandom().nextBytes(raw);
        char[] password = HexFormat.of().formatHex(raw).toCharArray();
        String keytool = Path.of(System.getProperty("java.home"), "bin", "keytool").toString();
        try {
            ProcessBuilder p = new ProcessBuilder(keytool, "-genkeypair", "-alias", "owner", "-keyalg", "EC",
                    "-groupname", "secp256r1", "-sigalg", "SHA256withECDSA", "-dname", "CN=viastack-bus-owner",
                    "-validity", "30", "-storetype", "PKCS12", "-keystore", ks.toString(),
                    "-storepass:env", "VIASTACK_OWNER_PASS")
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.DISCARD);
            p.environment().put("VIASTACK_OWNER_PASS", new String(password));
            Process run = p.start();
            if (!run.waitFor(60, TimeUnit.SECONDS) || run.exitValue() != 0) {
                run.destroyForcibly();
                throw new IOException("keytool could not make the owner's certificate");
            }
            return load(ks, password);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while making the owner's certificate", e);
        } finally {
            Arrays.fill(password, '\0');
            Files.deleteIfExists(ks);
            Files.deleteIfExists(dir);
        }
    }

    /** Accepts exactly the pinned certificate; no name, no chain, no clock. */
    private static final class Pinned extends X509ExtendedTrustManager {
        private final byte[] pin;

        Pinned(byte[] pin) {
            this.pin = pin.clone();
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            // The fingerprint is public (it travels in references): no need for constant time.
            if (chain == null || chain.length == 0 || !Arrays.equals(sha256(chain[0].getEncoded()), pin)) {
                throw new CertificateException("the owner's certificate does not match its pin");
            }
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, Socket s) throws CertificateException {
            checkServerTrusted(chain, authType);
        }

        @Override
        public void checkServerTrusted(X509Certificate[] chain, String authType, SSLEngine e) throws CertificateException {
            checkServerTrusted(chain, authType);
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType) throws CertificateException {
            throw new CertificateException("no client certificates");
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, Socket s) throws CertificateException {
            checkClientTrusted(chain, authType);
        }

        @Override
        public void checkClientTrusted(X509Certificate[] chain, String authType, SSLEngine e) throws CertificateException {
            checkClientTrusted(chain, authType);
        }

        @Override
        public X509Certificate[] getAcceptedIssuers() {
            return new X509Certificate[0];
        }
    }
}
