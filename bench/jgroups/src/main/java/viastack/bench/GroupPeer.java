package viastack.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;

import org.jgroups.BytesMessage;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.Receiver;
import org.jgroups.View;

/**
 * The JGroups side of {@code viastack bench group}: one member of a total-order group per JVM,
 * driven line by line on stdin, answering on stdout with lines that start with
 * {@code viastack-bench} — the same protocol as viastack's {@code viastack group peer}.
 *
 * <p>{@code GroupPeer CONFIG CLUSTER MEMBERS ID}: joins CLUSTER with the stack CONFIG (the
 * bench's {@code sequencer.xml}: tcp.xml with SEQUENCER) and says {@code ready VIEW} once the
 * view has MEMBERS members. {@code round R N SIZE}: multicasts N messages of SIZE bytes to the
 * group from the reading thread and answers {@code done R SECONDS HASH} once N × MEMBERS
 * messages of round R were delivered (from the command to the last delivery; HASH is FNV-1a
 * over the (member id, index) of each delivery in order: equal at every member when the order
 * is total). Every later view is reported as {@code view SIZE}. {@code quit} leaves.
 * Every message carries the round (4 bytes), its index (8) and the sender's ID (4).
 */
public final class GroupPeer {
    private static final Object lock = new Object();
    private static int round = -1;
    private static long expect;
    private static long got;
    private static long hash;
    private static long start;
    private static boolean ready;

    private static void say(String s) {
        synchronized (System.out) {
            System.out.println("viastack-bench " + s);
            System.out.flush();
        }
    }

    /** Starts counting round r (under the lock): at its command or its first delivery. */
    private static void begin(int r) {
        round = r;
        expect = -1;
        got = 0;
        hash = 0xcbf29ce484222325L;
        start = System.nanoTime();
    }

    /** Reports the round once every message was delivered (under the lock). */
    private static void finish() {
        if (expect >= 0 && got == expect) {
            double secs = (System.nanoTime() - start) / 1e9;
            say("done " + round + " " + secs + " " + String.format("%016x", hash));
            expect = -1;
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 4) {
            System.err.println("usage: GroupPeer CONFIG CLUSTER MEMBERS ID");
            System.exit(2);
        }
        int members = Integer.parseInt(args[2]);
        int me = Integer.parseInt(args[3]);
        try (JChannel ch = new JChannel(args[0])) {
            ch.setReceiver(new Receiver() {
                @Override
                public void viewAccepted(View v) {
                    synchronized (lock) {
                        if (!ready && v.size() == members) {
                            ready = true;
                            say("ready " + v.getViewId());
                        } else if (ready) {
                            say("view " + v.size());
                        }
                    }
                }

                @Override
                public void receive(Message msg) {
                    if (!msg.hasArray() || msg.getLength() < 16) {
                        return;
                    }
                    ByteBuffer b = ByteBuffer.wrap(msg.getArray(), msg.getOffset(), msg.getLength());
                    int r = b.getInt();
                    long index = b.getLong();
                    int from = b.getInt();
                    synchronized (lock) {
                        if (r < round) {
                            return;
                        }
                        if (r > round) {
                            begin(r); // another member's first message came before our command
                        }
                        got++;
                        byte[] key = ByteBuffer.allocate(12).putInt(from).putLong(index).array();
                        for (byte x : key) {
                            hash ^= (x & 0xff);
                            hash *= 0x100000001b3L;
                        }
                        finish();
                    }
                }
            });
            ch.connect(args[1]);
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split("\\s+");
                if (w[0].equals("quit")) {
                    break;
                }
                if (!w[0].equals("round") || w.length != 4) {
                    say("error unknown command: " + line);
                    continue;
                }
                int r = Integer.parseInt(w[1]);
                long n = Long.parseLong(w[2]);
                int size = Math.max(16, Integer.parseInt(w[3]));
                synchronized (lock) {
                    if (r != round) {
                        begin(r);
                    }
                    expect = n * members;
                    finish();
                }
                for (long i = 0; i < n; i++) {
                    byte[] payload = new byte[size];
                    ByteBuffer.wrap(payload).putInt(r).putLong(i).putInt(me);
                    ch.send(new BytesMessage(null, payload));
                }
            }
        }
        System.exit(0);
    }
}
