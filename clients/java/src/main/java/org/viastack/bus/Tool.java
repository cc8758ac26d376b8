package org.viastack.bus;

import java.io.IOException;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A bus tool in Java, with the API of the Rust (crates/bus/src/client.rs) and Python clients
 * (docs/BUS.md "The Java client"; seed 003, the tool side): connect and register with a token,
 * answer EVAL/DO requests, send events and notes, put values (by reference above the bus's
 * threshold: the value stays here and is streamed in PUT chunks to whoever GETs it, under the
 * window it grants with CREDIT), resolve received references (each fetched once and cached),
 * release them; a FIN from the bus frees an owned value. A daemon thread PINGs at a third of
 * the lease. A passive tool (no listener) serves its values through the bus: the bus relays
 * GET/CREDIT to it on the bus connection and its PUT chunks back to the consumer; a value
 * whose owner is passive is fetched the same way. On a TLS bus ({@link Config#tlsCa}) the
 * tool verifies the bus's certificate, serves its values over TLS with a pinned certificate
 * announced as {@code tls:HOST:PORT;sha256=FP}, and fetches only from pinned owners
 * ({@link Tls}; docs/BUS.md "Security").
 */
public final class Tool implements AutoCloseable {

    /** How a tool connects. */
    public static final class Config {
        /** Its name (its type in the script). */
        public String name;
        /** Its credential (empty: none). */
        public String token = "";
        /** Where it serves values: "127.0.0.1:0" (default), "unix:/path", or null (passive). */
        public String serve = "127.0.0.1:0";
        /** Bytes in flight granted when fetching, before a CREDIT. */
        public int window = 4 << 20;
        /** PUT chunk size when serving. */
        public int chunk = 256 * 1024;
        /** Largest frame accepted from the bus. */
        public int maxFrame = Frame.DEFAULT_MAX_FRAME;
        /**
         * A TLS bus ({@code bus serve --tls-cert/--tls-key}): the PEM file of the roots to trust
         * (a CA, or the bus's own self-signed certificate); null: plain TCP or Unix.
         */
        public java.nio.file.Path tlsCa;
        /** The name the bus's certificate must carry (a DNS name or an IP address). */
        public String tlsName = "localhost";
        /**
         * On a TLS bus, the PKCS#12 key store whose key and certificate a TCP listener serves
         * values with; null: a throwaway self-signed one made by keytool at connect time.
         */
        public java.nio.file.Path ownerKeyStore;
        /** The password of {@link #ownerKeyStore}. */
        public char[] ownerKeyStorePassword = new char[0];
        /**
         * On a TLS bus, also fetch from owners serving plain TCP (refused by default: the bus
         * vouches only for a pinned TLS listener).
         */
        public boolean plainOwners;

        public Config(String name) {
            this.name = name;
        }
    }

    private final Config config;
    private final Conn bus;
    private final Conn.Listener listener;
    private final long id;
    private final long threshold;
    private final long leaseMs;
    private final String location;
    private final Map<Long, byte[]> store = new ConcurrentHashMap<>();
    private final Map<List<Long>, Term> cache = new HashMap<>();
    /** Frames read while fetching through the bus, for nextRequest. */
    private final ArrayDeque<Frame> pending = new ArrayDeque<>();
    /** Values this tool sends through the bus: var -> {offset, window left}. */
    private final Map<Long, long[]> relaying = new HashMap<>();
    private volatile boolean closed;
    private static final java.security.SecureRandom RANDOM = new java.security.SecureRandom();
    private long nextEvent;
    private int fetches;
    private int tlsFetches;
    private int unverifiedOwners;

    private Tool(Config config, Conn bus, Conn.Listener listener, Frame reg) {
        this.config = config;
        this.bus = bus;
        this.listener = listener;
        this.location = listener == null ? "" : listener.location();
        this.id = reg.num("tool");
        this.threshold = reg.num("threshold");
        this.leaseMs = reg.num("lease_ms");
    }

    /** Connects to the bus at {@code host:port} or {@code unix:/path} and registers. */
    public static Tool connect(String busAddress, Config config) throws IOException {
        Tls.Identity identity = null;
        if (config.tlsCa != null && config.serve != null && !config.serve.startsWith("unix:")) {
            identity = config.ownerKeyStore != null
                    ? Tls.load(config.ownerKeyStore, config.ownerKeyStorePassword)
                    : Tls.generate();
        }
        Conn.Listener listener = config.serve == null ? null : new Conn.Listener(config.serve, identity);
        Conn bus = null;
        try {
            if (config.tlsCa != null) {
                javax.net.ssl.SSLContext ctx = Tls.busClient(config.tlsCa);
                try {
                    bus = Conn.connectTls(busAddress, ctx, config.tlsName);
                } catch (javax.net.ssl.SSLException e) {
                    throw new BusUnverifiedException(busAddress + ": the bus's certificate was refused: "
                            + e.getMessage(), e);
                }
            } else {
                bus = Conn.connect(busAddress);
            }
            String location = listener == null ? "" : listener.location();
            bus.write(Frame.of(Frame.Kind.HELLO, Frame.VERSION, config.name, location, config.token).encode());
            Frame reg;
            try {
                reg = bus.readFrame(config.maxFrame);
            } catch (FrameException e) {
                throw new IOException("bad frame in the handshake: " + e.getMessage(), e);
            }
            if (reg == null) {
                throw new BusClosedException("closed during the handshake");
            }
            if (reg.kind() == Frame.Kind.END) {
                throw new BusClosedException(reg.str("reason"));
            }
            if (reg.kind() != Frame.Kind.REG) {
                throw new IOException("REG expected, got " + reg.textFields().get("kind"));
            }
            Tool t = new Tool(config, bus, listener, reg);
            t.start();
            return t;
        } catch (IOException | RuntimeException e) {
            if (bus != null) {
                bus.close();
            }
            if (listener != null) {
                listener.close();
            }
            throw e;
        }
    }

    /** Connects with the default configuration and a token. */
    public static Tool connect(String busAddress, String name, String token) throws IOException {
        Config c = new Config(name);
        c.token = token;
        return connect(busAddress, c);
    }

    private void start() {
        long every = Math.max(leaseMs, 3) / 3;
        Thread ping = new Thread(() -> {
            long nonce = 0;
            while (!closed) {
                try {
                    Thread.sleep(every);
                    if (!closed) {
                        bus.write(Frame.of(Frame.Kind.PING, ++nonce).encode());
                    }
                } catch (IOException | InterruptedException e) {
                    return;
                }
            }
        }, "viastack-bus-ping");
        ping.setDaemon(true);
        ping.start();
        if (listener != null) {
            Thread serve = new Thread(this::serveValues, "viastack-bus-values");
            serve.setDaemon(true);
            serve.start();
        }
    }

    /** The tool id the bus assigned. */
    public long id() {
        return id;
    }

    /** Where this tool serves its values ("" when passive). */
    public String location() {
        return location;
    }

    /** Values larger than this (encoded) go by reference. */
    public long threshold() {
        return threshold;
    }

    /** Owned values not yet freed by a FIN. */
    public int held() {
        return store.size();
    }

    /** References fetched from other tools so far. */
    public int fetches() {
        return fetches;
    }

    /** Of the fetches, those over TLS from an owner whose certificate matched its pin. */
    public int tlsFetches() {
        return tlsFetches;
    }

    /** Fetches refused because the owner was not verified ({@link OwnerUnverifiedException}). */
    public int unverifiedOwners() {
        return unverifiedOwners;
    }

    /**
     * The next request: EVAL, DO, ACK_EVENT, FIN (already applied: the value is freed), FAIL or
     * TERMINATE; PINGs and unknown kinds are skipped.
     *
     * @throws BusClosedException on END or a closed connection
     * @throws FrameException on a malformed frame (the connection is then unusable)
     */
    public Frame nextRequest() throws IOException, FrameException {
        while (true) {
            Frame f = pending.poll();
            if (f == null) {
                f = readBus();
                if (ownerFrame(f)) {
                    continue;
                }
            }
            if (f.kind() == null || f.kind() == Frame.Kind.PING) {
                continue;
            }
            switch (f.kind()) {
                case FIN -> store.remove(f.num("var"));
                case END -> throw new BusClosedException(f.str("reason"));
                default -> { }
            }
            return f;
        }
    }

    private Frame readBus() throws IOException, FrameException {
        Frame f = bus.readFrame(config.maxFrame);
        if (f == null) {
            throw new BusClosedException("connection closed");
        }
        return f;
    }

    /**
     * A GET or CREDIT the bus relays to this owner (a passive tool's values go through the
     * bus): answered with PUT chunks on the bus connection within the window. True if handled.
     */
    private boolean ownerFrame(Frame f) throws IOException {
        if (f.kind() == Frame.Kind.GET) {
            long var = f.num("var");
            if (!store.containsKey(var)) {
                bus.write(Frame.of(Frame.Kind.FAIL, f.num("delivery"), 3L, "no variable " + var).encode());
                return true;
            }
            relaying.put(var, new long[] {f.num("offset"), f.num("window")});
            pump(var);
            return true;
        }
        if (f.kind() == Frame.Kind.CREDIT) {
            long[] r = relaying.get(f.num("var"));
            if (r != null) {
                r[1] += f.num("bytes");
                pump(f.num("var"));
            }
            return true;
        }
        return false;
    }

    private void pump(long var) throws IOException {
        byte[] value = store.get(var);
        long[] r = relaying.get(var);
        if (value == null) {
            relaying.remove(var);
            return;
        }
        long total = value.length;
        long pos = r[0] < 0 ? total : Math.min(r[0], total);
        while (pos < total && r[1] > 0) {
            int n = (int) Math.min(Math.min(config.chunk, r[1]), total - pos);
            bus.write(putHead(var, pos, total, n), value, (int) pos, n);
            pos += n;
            r[1] -= n;
        }
        r[0] = pos;
        if (pos >= total) {
            relaying.remove(var);
        }
    }

    /** Answers EVAL {@code request}. */
    public void value(long request, Term t) throws IOException {
        bus.write(Frame.of(Frame.Kind.VALUE, request, t).encode());
    }

    /** Sends an event; returns its number. */
    public synchronized long event(Term t) throws IOException {
        long n = ++nextEvent;
        bus.write(Frame.of(Frame.Kind.EVENT, n, t).encode());
        return n;
    }

    /** Sends a note. */
    public void note(Term t) throws IOException {
        bus.write(Frame.of(Frame.Kind.NOTE, t).encode());
    }

    /**
     * The term to send for {@code t}: itself when its encoding is at most the threshold, else a
     * reference to it, kept here until the bus's FIN (a passive tool's reference has an empty
     * location: consumers get the value through the bus).
     */
    public Term put(Term t) {
        byte[] data = TermCodec.encode(t);
        if (data.length <= threshold) {
            return t;
        }
        // 62 random bits, never 0 nor in use: the variable number is the value's capability
        // (the owner serves a GET for any variable it holds), so it must not be guessable.
        long v;
        do {
            v = RANDOM.nextLong() >>> 2;
        } while (v == 0 || store.containsKey(v));
        store.put(v, data);
        return new Term.Ref(id, v, data.length, location, Terms.signature(t));
    }

    /**
     * {@code t} with its references replaced by their values (each fetched from its owner once,
     * then cached), then ACK of {@code delivery} (0: none) so the bus can release its count.
     */
    public Term resolve(Term t, long delivery) throws IOException {
        for (Term.Ref r : Terms.refs(t)) {
            List<Long> key = List.of(r.owner(), r.var());
            if (cache.containsKey(key)) {
                continue;
            }
            byte[] data;
            if (r.owner() == id && store.containsKey(r.var())) {
                data = store.get(r.var());
            } else {
                data = fetch(r, delivery);
                fetches++;
            }
            try {
                cache.put(key, TermCodec.decode(data));
            } catch (TermException e) {
                throw new TransferFailedException(0, "the fetched value does not decode: " + e.getMessage());
            }
        }
        Term out = Terms.replaceRefs(t, cache);
        if (delivery != 0) {
            bus.write(Frame.of(Frame.Kind.ACK, delivery).encode());
        }
        return out;
    }

    /** Forgets the fetched values of the references in {@code t}. */
    public void release(Term t) {
        for (Term.Ref r : Terms.refs(t)) {
            cache.remove(List.of(r.owner(), r.var()));
        }
    }

    /** Says END to the bus and closes. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            bus.write(Frame.of(Frame.Kind.END, "bye").encode());
        } catch (IOException e) {
            // the bus is gone already
        }
        bus.close();
        if (listener != null) {
            listener.close();
        }
    }

    /**
     * A passive owner's value through the bus: GET/CREDIT on the bus connection, the owner's
     * PUT chunks relayed back; other frames meanwhile wait for nextRequest.
     */
    private byte[] fetchRelayed(Term.Ref r, long delivery, int size) throws IOException {
        int window = config.window;
        bus.write(Frame.of(Frame.Kind.GET, delivery, r.var(), 0L, (long) window).encode());
        byte[] out = new byte[size];
        int have = 0;
        long since = 0;
        while (have < size) {
            Frame f;
            try {
                f = readBus();
            } catch (FrameException e) {
                throw new TransferFailedException(0, "bad frame from the bus: " + e.getMessage());
            }
            if (ownerFrame(f)) {
                continue;
            }
            if (f.kind() == Frame.Kind.PUT && f.num("var") == r.var()) {
                byte[] d = f.data();
                if (f.num("offset") != have || f.num("total") != size || d.length > size - have) {
                    throw new TransferFailedException(0, "relayed PUT out of order");
                }
                System.arraycopy(d, 0, out, have, d.length);
                have += d.length;
                since += d.length;
                if (since >= window / 2 && have < size) {
                    bus.write(Frame.of(Frame.Kind.CREDIT, r.var(), since).encode());
                    since = 0;
                }
            } else if (f.kind() == Frame.Kind.FAIL && f.num("delivery") == delivery) {
                throw new TransferFailedException((int) f.num("code"), f.str("detail"));
            } else if (f.kind() == Frame.Kind.END) {
                throw new BusClosedException(f.str("reason"));
            } else {
                pending.add(f);
            }
        }
        return out;
    }

    private byte[] fetch(Term.Ref r, long delivery) throws IOException {
        if (r.size() < 0 || r.size() > Integer.MAX_VALUE - 8) {
            throw new TransferFailedException(0, "value of " + Long.toUnsignedString(r.size()) + " bytes is too large");
        }
        int size = (int) r.size();
        if (r.location().isEmpty()) {
            return fetchRelayed(r, delivery, size);
        }
        byte[] out = new byte[size];
        int window = config.window;
        boolean tls = r.location().startsWith(Tls.PREFIX);
        try (Conn c = connectOwner(r.location())) {
            c.write(Frame.of(Frame.Kind.GET, delivery, r.var(), 0L, (long) window).encode());
            int have = 0;
            long since = 0;
            while (have < size) {
                Frame f;
                try {
                    f = c.readFrame((long) config.chunk + 64 + config.maxFrame);
                } catch (FrameException e) {
                    throw new TransferFailedException(0, "bad frame from the owner: " + e.getMessage());
                }
                if (f == null) {
                    throw new TransferFailedException(0, "owner closed the transfer");
                }
                if (f.kind() == Frame.Kind.FAIL) {
                    throw new TransferFailedException((int) f.num("code"), f.str("detail"));
                }
                if (f.kind() != Frame.Kind.PUT || f.num("offset") != have || f.num("total") != size
                        || f.data().length > size - have) {
                    throw new TransferFailedException(0, "unexpected " + f);
                }
                byte[] d = f.data();
                System.arraycopy(d, 0, out, have, d.length);
                have += d.length;
                since += d.length;
                if (since >= window / 2 && have < size) {
                    c.write(Frame.of(Frame.Kind.CREDIT, r.var(), since).encode());
                    since = 0;
                }
            }
            try {
                // Best effort, as in the Rust client: the owner may already have closed after
                // its last chunk (a Unix socket then refuses the write with EPIPE).
                c.write(Frame.of(Frame.Kind.END, "done").encode());
            } catch (IOException e) {
                // the value is whole: nothing is lost
            }
        }
        if (tls) {
            tlsFetches++;
        }
        return out;
    }

    /**
     * A location without its same-host part: a Rust owner serving TCP also announces a Unix
     * socket as {@code BASE;local=BOOT_ID@/path}, where same-host consumers get the value as a
     * memfd passed with SCM_RIGHTS. The JDK cannot receive a descriptor over a Unix socket
     * (no SCM_RIGHTS without native code), so this client always fetches at BASE (TCP or TLS).
     */
    static String baseLocation(String location) {
        int at = location.lastIndexOf(";local=");
        return at < 0 ? location : location.substring(0, at);
    }

    /**
     * A connection to an owner: TLS accepting only the certificate a {@code tls:} location
     * pins; on a TLS bus, a plain TCP owner is refused unless {@link Config#plainOwners}.
     */
    private Conn connectOwner(String location) throws IOException {
        location = baseLocation(location);
        if (location.startsWith(Tls.PREFIX)) {
            Object[] parsed = Tls.parseLocation(location);
            if (parsed == null) {
                unverifiedOwners++;
                throw new OwnerUnverifiedException(location, "malformed TLS location");
            }
            try {
                return Conn.connectTls((String) parsed[0], Tls.pinned((byte[]) parsed[1]), null);
            } catch (javax.net.ssl.SSLException e) {
                unverifiedOwners++;
                throw new OwnerUnverifiedException(location, "handshake failed: " + e.getMessage());
            }
        }
        if (config.tlsCa != null && !config.plainOwners && !location.startsWith("unix:")) {
            unverifiedOwners++;
            throw new OwnerUnverifiedException(location, "the owner serves plain TCP while this tool is on a TLS bus");
        }
        return Conn.connect(location);
    }

    private void serveValues() {
        while (!closed) {
            Conn c;
            try {
                c = listener.accept();
            } catch (IOException e) {
                return;
            }
            Thread t = new Thread(() -> serveOne(c), "viastack-bus-put");
            t.setDaemon(true);
            t.start();
        }
    }

    private void serveOne(Conn c) {
        try (c) {
            while (true) {
                Frame f = c.readFrame(1024);
                if (f != null && f.kind() == Frame.Kind.CREDIT) {
                    continue; // credit granted after the last chunk went out
                }
                if (f == null || f.kind() != Frame.Kind.GET) {
                    return;
                }
                long var = f.num("var");
                byte[] value = store.get(var);
                if (value != null && f.num("window") == 0) {
                    // A same-host consumer asking for a memfd (docs/WIRE.md): declined, it
                    // then sends a streaming GET on this connection.
                    c.write(Frame.of(Frame.Kind.FAIL, f.num("delivery"), 2L, "no memfd from a Java owner").encode());
                    continue;
                }
                if (value == null) {
                    c.write(Frame.of(Frame.Kind.FAIL, f.num("delivery"), 3L, "no variable " + var).encode());
                    continue;
                }
                long total = value.length;
                long pos = Math.min(f.num("offset") < 0 ? total : f.num("offset"), total);
                long allowed = f.num("window");
                while (pos < total) {
                    if (allowed == 0) {
                        Frame credit = c.readFrame(1024);
                        if (credit == null || credit.kind() != Frame.Kind.CREDIT) {
                            return;
                        }
                        allowed += credit.num("bytes");
                        continue;
                    }
                    int n = (int) Math.min(Math.min(config.chunk, allowed), total - pos);
                    c.write(putHead(var, pos, total, n), value, (int) pos, n);
                    pos += n;
                    allowed -= n;
                }
            }
        } catch (IOException | FrameException e) {
            // the fetcher went away or broke the protocol: its transfer fails on its side
        }
    }

    /** The bytes of a PUT frame up to its data (written without copying the value). */
    private static byte[] putHead(long var, long offset, long total, int n) {
        byte[] h = Frame.of(Frame.Kind.PUT, var, offset, total, new byte[0]).encode();
        int len = h.length - 4 + n;
        h[0] = (byte) (len >>> 24);
        h[1] = (byte) (len >>> 16);
        h[2] = (byte) (len >>> 8);
        h[3] = (byte) len;
        return Arrays.copyOf(h, h.length);
    }
}
