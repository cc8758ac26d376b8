package org.viastack.bus;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * One stream connection, TCP or Unix ({@code unix:/path}), read by one thread and written
 * under a lock by any: whole frames in, whole frames out.
 */
final class Conn implements Closeable {
    private final Socket socket;
    private final SocketChannel channel;
    private final InputStream in;
    private final OutputStream out;

    private Conn(Socket socket) throws IOException {
        this.socket = socket;
        this.channel = null;
        socket.setTcpNoDelay(true);
        this.in = new BufferedInputStream(socket.getInputStream(), 64 * 1024);
        // Over TLS a frame's header and data go out as one record (one flush per frame).
        this.out = socket instanceof SSLSocket
                ? new BufferedOutputStream(socket.getOutputStream(), 16 * 1024)
                : socket.getOutputStream();
    }

    private Conn(SocketChannel channel) {
        this.socket = null;
        this.channel = channel;
        this.in = null;
        this.out = null;
    }

    /** Connects to {@code host:port} or {@code unix:/path}. */
    static Conn connect(String location) throws IOException {
        if (location.startsWith("unix:")) {
            SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            ch.connect(UnixDomainSocketAddress.of(location.substring(5)));
            return new Conn(ch);
        }
        return new Conn(tcp(location));
    }

    /**
     * Connects to {@code host:port} over TLS with {@code ctx} and completes the handshake;
     * when {@code name} is not null the certificate must carry it (as HTTPS checks names).
     *
     * @throws SSLException when the peer's certificate is refused
     */
    static Conn connectTls(String location, SSLContext ctx, String name) throws IOException {
        Socket raw = tcp(location);
        try {
            String host = name != null ? name : "viastack-bus-owner";
            SSLSocket s = (SSLSocket) ctx.getSocketFactory().createSocket(raw, host, raw.getPort(), true);
            if (name != null) {
                SSLParameters p = s.getSSLParameters();
                p.setEndpointIdentificationAlgorithm("HTTPS");
                s.setSSLParameters(p);
            }
            s.startHandshake();
            return new Conn(s);
        } catch (IOException | RuntimeException e) {
            raw.close();
            throw e;
        }
    }

    private static Socket tcp(String location) throws IOException {
        int colon = location.lastIndexOf(':');
        if (colon < 0) {
            throw new IOException("not host:port or unix:/path: " + location);
        }
        String host = location.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) {
            host = host.substring(1, host.length() - 1);
        }
        int port;
        try {
            port = Integer.parseInt(location.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new IOException("bad port in " + location);
        }
        return new Socket(host, port);
    }

    /** Reads exactly {@code len} bytes; false if the stream ended before the first. */
    boolean readFully(byte[] b, int off, int len) throws IOException {
        int got = 0;
        while (got < len) {
            int n;
            if (in != null) {
                n = in.read(b, off + got, len - got);
            } else {
                n = channel.read(ByteBuffer.wrap(b, off + got, len - got));
            }
            if (n < 0) {
                if (got == 0) {
                    return false;
                }
                throw new EOFException("connection closed inside a frame");
            }
            got += n;
        }
        return true;
    }

    /** The next whole frame, or null when the peer closed the connection between frames. */
    Frame readFrame(long maxFrame) throws IOException, FrameException {
        byte[] head = new byte[4];
        if (!readFully(head, 0, 4)) {
            return null;
        }
        int total = (int) Frame.frameLen(head, Math.min(maxFrame, Integer.MAX_VALUE - 8));
        byte[] body = new byte[total - 4];
        if (!readFully(body, 0, body.length)) {
            throw new EOFException("connection closed inside a frame");
        }
        return Frame.decodeBody(body[0] & 0xff, body, 1, body.length);
    }

    synchronized void write(byte[] b) throws IOException {
        write(b, 0, b.length);
        flush();
    }

    /** Writes a header and a slice of data as one frame's bytes, atomically. */
    synchronized void write(byte[] head, byte[] data, int off, int len) throws IOException {
        write(head, 0, head.length);
        write(data, off, len);
        flush();
    }

    private void flush() throws IOException {
        if (out != null) {
            out.flush();
        }
    }

    private void write(byte[] b, int off, int len) throws IOException {
        if (out != null) {
            out.write(b, off, len);
        } else {
            ByteBuffer buf = ByteBuffer.wrap(b, off, len);
            while (buf.hasRemaining()) {
                channel.write(buf);
            }
        }
    }

    @Override
    public void close() {
        try {
            if (socket != null) {
                socket.close();
            } else {
                channel.close();
            }
        } catch (IOException e) {
            // closing a dead connection: nothing to do
        }
    }

    /** A listening socket for a tool's values: {@code host:port} or {@code unix:/path}. */
    static final class Listener implements Closeable {
        private final ServerSocket server;
        private final ServerSocketChannel unix;
        private final String location;

        Listener(String where) throws IOException {
            this(where, null);
        }

        /** With {@code tls}: a TCP listener serves TLS and its location pins the certificate. */
        Listener(String where, Tls.Identity tls) throws IOException {
            if (where.startsWith("unix:")) {
                Path p = Path.of(where.substring(5));
                Files.deleteIfExists(p);
                unix = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
                unix.bind(UnixDomainSocketAddress.of(p));
                server = null;
                location = where;
            } else {
                int colon = where.lastIndexOf(':');
                String host = where.substring(0, colon);
                int port = Integer.parseInt(where.substring(colon + 1));
                server = tls == null ? new ServerSocket() : tls.server().getServerSocketFactory().createServerSocket();
                server.bind(new InetSocketAddress(host, port));
                unix = null;
                String addr = host + ":" + server.getLocalPort();
                location = tls == null ? addr : tls.location(addr);
            }
        }

        String location() {
            return location;
        }

        Conn accept() throws IOException {
            return server != null ? new Conn(server.accept()) : new Conn(unix.accept());
        }

        @Override
        public void close() {
            try {
                if (server != null) {
                    server.close();
                } else {
                    unix.close();
                    Files.deleteIfExists(Path.of(location.substring(5)));
                }
            } catch (IOException e) {
                // already closed
            }
        }
    }
}
