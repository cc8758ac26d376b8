package viastack.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.TimeUnit;

import org.jgroups.Address;
import org.jgroups.BytesMessage;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.Receiver;

/**
 * The JGroups side of {@code viastack bench unicast}: one JVM per role, driven line by line
 * on stdin by the bench, answering on stdout with lines that start with {@code viastack-bench}
 * (JGroups prints its own lines there too).
 *
 * <p>{@code receiver CONFIG CLUSTER}: joins the cluster, counts the messages of each round and, when a
 * round's count is reached, sends one reply message to the round's sender. {@code sender
 * CONFIG CLUSTER}: joins, waits for the receiver, then for each {@code round R N SIZE} line sends N
 * messages of SIZE bytes from one thread to the receiver with {@code JChannel.send}, waits for
 * the reply and prints {@code viastack-bench done R SECONDS}: the time from the first send to
 * the reply's arrival. Every message carries the round and the count in its first 8 bytes.
 *
 * <p>CONFIG is a stack shipped in the JGroups jar ({@code tcp.xml}: UNICAST3 and UFC;
 * {@code tcp-new.xml}: UNICAST4), used unchanged; the bench binds every socket to 127.0.0.1 with
 * {@code -Djgroups.bind_addr=127.0.0.1}.
 */
public final class Peer {
    public static void main(String[] args) throws Exception {
        if (args.length != 3 || !(args[0].equals("sender") || args[0].equals("receiver"))) {
            System.err.println("usage: Peer sender|receiver CONFIG CLUSTER");
            System.exit(2);
        }
        boolean sender = args[0].equals("sender");
        SynchronousQueue<Integer> replies = new SynchronousQueue<>();
        ExecutorService replier = Executors.newSingleThreadExecutor();
        try (JChannel ch = new JChannel(args[1])) {
            ch.setReceiver(new Receiver() {
                private int round = -1;
                private int count;

                @Override
                public void receive(Message msg) {
                    if (!msg.hasArray() || msg.getLength() < 8) {
                        return; // not one of ours
                    }
                    ByteBuffer b = ByteBuffer.wrap(msg.getArray(), msg.getOffset(), msg.getLength());
                    int r = b.getInt();
                    if (sender) {
                        replies.offer(r);
                        return;
                    }
                    int n = b.getInt();
                    if (r != round) {
                        round = r;
                        count = 0;
                    }
                    if (++count == n) {
                        Address to = msg.getSrc();
                        byte[] reply = ByteBuffer.allocate(8).putInt(r).putInt(n).array();
                        // Not from the delivery thread: a send may block on flow control.
                        replier.execute(() -> {
                            try {
                                ch.send(new BytesMessage(to, reply));
                            } catch (Exception e) {
                                e.printStackTrace();
                            }
                        });
                    }
                }
            });
            ch.connect(args[2]);
            if (sender) {
                while (ch.getView().size() < 2) {
                    Thread.sleep(20);
                }
            }
            System.out.println("viastack-bench ready " + ch.getAddress());
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split("\\s+");
                if (w[0].equals("quit")) {
                    break;
                }
                if (!sender || !w[0].equals("round") || w.length != 4) {
                    System.out.println("viastack-bench error unknown command: " + line);
                    System.out.flush();
                    continue;
                }
                int r = Integer.parseInt(w[1]);
                int n = Integer.parseInt(w[2]);
                int size = Math.max(8, Integer.parseInt(w[3]));
                Address dest = null;
                for (Address a : ch.getView().getMembers()) {
                    if (!a.equals(ch.getAddress())) {
                        dest = a;
                    }
                }
                byte[] payload = new byte[size];
                ByteBuffer.wrap(payload).putInt(r).putInt(n);
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    ch.send(new BytesMessage(dest, payload));
                }
                Integer got = replies.poll(120, TimeUnit.SECONDS);
                long t1 = System.nanoTime();
                if (got == null || got != r) {
                    System.out.println("viastack-bench error no reply for round " + r);
                } else {
                    System.out.println("viastack-bench done " + r + " " + (t1 - t0) / 1e9);
                }
                System.out.flush();
            }
        } finally {
            replier.shutdownNow();
        }
        System.exit(0);
    }
}
