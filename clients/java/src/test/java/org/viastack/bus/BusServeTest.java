package org.viastack.bus;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Java tools against a real {@code viastack bus serve} ($VIASTACK_BIN; the test skips, saying
 * so, when it is unset): a 3 MB value goes from the producer to the consumer by reference
 * (fetched once though sent twice, chunked under a window smaller than the value so CREDIT
 * flows), and FIN frees it at the producer; over TCP and over Unix sockets, with a token.
 */
class BusServeTest {
    static final String SCRIPT = """
            process Main is let P : producer, C : consumer, V : term, R : term in
                rec-connect(P?) . rec-connect(C?) .
                snd-eval(P, make(3000000)) . rec-value(P, V?) .
                snd-eval(C, consume(V)) . rec-value(C, R?) .
                snd-eval(C, consume(V)) . rec-value(C, R?) .
                V := none . snd-terminate(C, done) . snd-terminate(P, done)
            endlet
            tool producer is { }
            tool consumer is { }
            toolbus(Main)
            """;

    static String binary() {
        String bin = System.getenv("VIASTACK_BIN");
        if (bin == null || bin.isEmpty()) {
            System.err.println("skipped: BusServeTest needs VIASTACK_BIN (a viastack binary) to run Java tools against a real bus");
        }
        assumeTrue(bin != null && !bin.isEmpty(),
                "skipped: set VIASTACK_BIN to a viastack binary to run the Java client against a real bus");
        assertTrue(Files.isExecutable(Path.of(bin)), "VIASTACK_BIN=" + bin + " is not executable");
        return bin;
    }

    static byte[] pattern(int n) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            b[i] = (byte) (i * 7 + (i >>> 11));
        }
        return b;
    }

    /** Starts the bus on {@code listen}; returns it and its address (first stdout line). */
    static Process startBus(Path dir, String listen) throws Exception {
        Path script = dir.resolve("pipe.tb");
        Files.writeString(script, SCRIPT);
        return new ProcessBuilder(binary(), "bus", "serve", "--listen", listen, "--token", "s3cret",
                script.toString()).redirectError(ProcessBuilder.Redirect.INHERIT).start();
    }

    static String address(Process bus) throws Exception {
        BufferedReader r = new BufferedReader(new InputStreamReader(bus.getInputStream(), StandardCharsets.UTF_8));
        String line = r.readLine();
        assertTrue(line != null && line.startsWith("viastack bus listening on "), "bus said: " + line);
        return line.substring(line.lastIndexOf(' ') + 1);
    }

    void run(Path dir, String listen, String producerServe) throws Exception {
        run(dir, listen, producerServe, null);
    }

    void run(Path dir, String listen, String producerServe, String consumerServe) throws Exception {
        Process bus = startBus(dir, listen);
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try {
            String addr = address(bus);
            byte[] payload = pattern(3_000_000);
            Future<Object[]> producer = pool.submit(() -> {
                Tool.Config c = new Tool.Config("producer");
                c.token = "s3cret";
                c.serve = producerServe;
                c.chunk = 64 * 1024;
                try (Tool t = Tool.connect(addr, c)) {
                    Term sent = null;
                    int fins = 0;
                    while (true) {
                        Frame f = t.nextRequest();
                        switch (f.kind()) {
                            case EVAL -> {
                                sent = t.put(Term.appl("data", Term.string("big"), Term.blob(payload)));
                                t.value(f.num("request"), sent);
                            }
                            case FIN -> fins++;
                            case TERMINATE -> {
                                return new Object[] {sent, fins, t.held()};
                            }
                            default -> { }
                        }
                    }
                }
            });
            Future<Object[]> consumer = pool.submit(() -> {
                Tool.Config c = new Tool.Config("consumer");
                c.token = "s3cret";
                c.serve = consumerServe;
                c.window = 512 * 1024;
                try (Tool t = Tool.connect(addr, c)) {
                    Term received = null;
                    byte[] got = null;
                    while (true) {
                        Frame f = t.nextRequest();
                        switch (f.kind()) {
                            case EVAL -> {
                                received = f.term();
                                Term v = t.resolve(received, f.num("delivery"));
                                Term.Appl consume = (Term.Appl) v;
                                Term.Appl data = (Term.Appl) consume.args().get(0);
                                got = ((Term.Blob) data.args().get(1)).data();
                                t.value(f.num("request"), Term.appl("ok"));
                            }
                            case TERMINATE -> {
                                return new Object[] {received, got, t.fetches()};
                            }
                            default -> { }
                        }
                    }
                }
            });
            // The consumer first: it ends first, and its failure is the one to see.
            Object[] c = consumer.get(60, TimeUnit.SECONDS);
            Object[] p = producer.get(60, TimeUnit.SECONDS);
            assertTrue(bus.waitFor(60, TimeUnit.SECONDS), "the bus ends when the script does");
            assertEquals(0, bus.exitValue());

            Term.Ref ref = assertInstanceOf(Term.Ref.class, p[0], "3 MB goes by reference");
            assertEquals(producerServe == null, ref.location().isEmpty(), "a passive owner's reference has no location");
            assertEquals("data(\"big\",<blob>)", ref.sig().toText());
            // The consumer received the reference itself (the bus never carried the value) ...
            Term.Appl consume = (Term.Appl) c[0];
            assertEquals(ref, consume.args().get(0));
            // ... fetched it once though it was sent twice, and got every byte.
            assertArrayEquals(payload, (byte[]) c[1]);
            assertEquals(1, c[2]);
            // The script dropped V: FIN freed the value at the producer.
            assertEquals(1, p[1]);
            assertEquals(0, p[2]);
        } finally {
            pool.shutdownNow();
            bus.destroyForcibly();
        }
    }

    @Test
    void valueByReferenceBetweenJavaToolsOverTcp(@TempDir Path dir) throws Exception {
        run(dir, "127.0.0.1:0", "127.0.0.1:0");
    }

    @Test
    void valueByReferenceBetweenJavaToolsOverUnixSockets(@TempDir Path dir) throws Exception {
        run(dir, "unix:" + dir.resolve("bus.sock"), "unix:" + dir.resolve("producer.sock"));
    }

    /** Seed 003's passive-passive case: neither tool listens, the value goes through the bus. */
    @Test
    void valueOfAPassiveOwnerRelayedThroughTheBusToAPassiveConsumer(@TempDir Path dir) throws Exception {
        run(dir, "127.0.0.1:0", null, null);
    }

    /** Both tools active: the consumer fetches from the owner directly. */
    @Test
    void activeConsumerFetchesFromAnActiveOwner(@TempDir Path dir) throws Exception {
        run(dir, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0");
    }

    @Test
    void aWrongTokenIsRefused(@TempDir Path dir) throws Exception {
        Process bus = startBus(dir, "127.0.0.1:0");
        try {
            String addr = address(bus);
            BusClosedException e = assertThrows(BusClosedException.class, () -> Tool.connect(addr, "producer", "wrong"));
            assertTrue(e.getMessage().length() > 0);
        } finally {
            bus.destroyForcibly();
        }
    }
}
