package viastack.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.jgroups.Address;
import org.jgroups.BytesMessage;
import org.jgroups.JChannel;
import org.jgroups.Message;
import org.jgroups.Receiver;

/**
 * The JGroups side of {@code viastack bench multicast} (issue 17 "Figures", peer lane): one
 * JVM holding one sending channel and RECEIVERS receiving channels of one cluster, driven line
 * by line on stdin, answering on stdout with lines that start with {@code viastack-bench}.
 *
 * <p>{@code McastPeer CONFIG CLUSTER RECEIVERS}: every channel joins the cluster; once the
 * sender's view holds all of them it prints {@code viastack-bench ready}. For each
 * {@code round R N SIZE} line the sender multicasts N messages of SIZE bytes (at least 8) to the
 * whole cluster from one thread with {@code JChannel.send(null, ...)}; each receiver counts the
 * round's messages and, when it has all N, sends one unicast reply to the sender; when every
 * receiver has replied the sender prints {@code viastack-bench done R SECONDS}: the time from
 * the first send until the last receiver had all N. Every message carries the round and the
 * count in its first 8 bytes.
 *
 * <p>CONFIG is a stack shipped in the JGroups jar ({@code tcp.xml}: TCP transport, NAKACK2
 * reliable multicast, UNICAST3, STABLE, UFC/MFC flow control), used unchanged; the bench binds
 * every socket to 127.0.0.1. A separate class from {@link Peer} (the unicast lane).
 */
public final class McastPeer {
    /** A receiving channel's count of the current round. */
    private static final class Counter implements Receiver {
        private final JChannel ch;
        private final ExecutorService replier;
        private int round = -1;
        private int count;

        Counter(JChannel ch, ExecutorService replier) {
            this.ch = ch;
            this.replier = replier;
        }

        @Override
        public void receive(Message msg) {
            if (!msg.hasArray() || msg.getLength() < 8) {
                return; // not one of ours
            }
            ByteBuffer b = ByteBuffer.wrap(msg.getArray(), msg.getOffset(), msg.getLength());
            int r = b.getInt();
            int n = b.getInt();
            if (r != round) {
                round = r;
                count = 0;
            }
            if (++count == n) {
                Address to = msg.getSrc();
                byte[] reply = ByteBuffer.allocate(8).putInt(r).putInt(-1).array();
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
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: McastPeer CONFIG CLUSTER RECEIVERS");
            System.exit(2);
        }
        String config = args[0];
        String cluster = args[1];
        int receivers = Integer.parseInt(args[2]);
        LinkedBlockingQueue<Integer> replies = new LinkedBlockingQueue<>();
        ExecutorService replier = Executors.newSingleThreadExecutor();
        List<JChannel> rx = new ArrayList<>();
        JChannel tx = new JChannel(config);
        try {
            for (int i = 0; i < receivers; i++) {
                JChannel ch = new JChannel(config);
                ch.setReceiver(new Counter(ch, replier));
                ch.connect(cluster);
                rx.add(ch);
            }
            tx.setReceiver(new Receiver() {
                @Override
                public void receive(Message msg) {
                    if (!msg.hasArray() || msg.getLength() < 8) {
                        return;
                    }
                    ByteBuffer b = ByteBuffer.wrap(msg.getArray(), msg.getOffset(), msg.getLength());
                    int r = b.getInt();
                    if (b.getInt() == -1) {
                        replies.offer(r);
                    }
                }
            });
            tx.connect(cluster);
            while (tx.getView().size() < receivers + 1) {
                Thread.sleep(20);
            }
            System.out.println("viastack-bench ready " + tx.getView().size());
            System.out.flush();
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
            String line;
            while ((line = in.readLine()) != null) {
                String[] w = line.trim().split("\\s+");
                if (w[0].equals("quit")) {
                    break;
                }
                if (!w[0].equals("round") || w.length != 4) {
                    System.out.println("viastack-bench error unknown command: " + line);
                    System.out.flush();
                    continue;
                }
                int r = Integer.parseInt(w[1]);
                int n = Integer.parseInt(w[2]);
                int size = Math.max(8, Integer.parseInt(w[3]));
                byte[] payload = new byte[size];
                ByteBuffer.wrap(payload).putInt(r).putInt(n);
                replies.clear();
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) {
                    tx.send(new BytesMessage(null, payload));
                }
                int got = 0;
                while (got < receivers) {
                    Integer g = replies.poll(120, TimeUnit.SECONDS);
                    if (g == null) {
                        break;
                    }
                    if (g == r) {
                        got++;
                    }
                }
                long t1 = System.nanoTime();
                if (got < receivers) {
                    System.out.println("viastack-bench error " + got + " of " + receivers
                        + " receivers replied in round " + r);
                } else {
                    System.out.println("viastack-bench done " + r + " " + (t1 - t0) / 1e9);
                }
                System.out.flush();
            }
        } finally {
            replier.shutdownNow();
            tx.close();
            for (JChannel ch : rx) {
                ch.close();
            }
        }
        System.exit(0);
    }
}
