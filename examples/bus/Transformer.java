import java.io.IOException;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;
import org.viastack.bus.Frame;
import org.viastack.bus.FrameException;
import org.viastack.bus.Term;
import org.viastack.bus.Tool;

/**
 * The Java transformer of the three-language example (three-languages.tb): on
 * transform(data(SHA256, BLOB)), received as a reference, it fetches the value from its owner
 * (the Python producer), complements every byte, and answers
 * transformed("complement", SHA256, SHA256', BLOB') through {@link Tool#put}, so the result
 * goes on by reference too; it frees it on the bus's FIN.
 */
public final class Transformer {
    private static void log(String msg) {
        System.err.println("transformer (Java): " + msg);
    }

    public static void main(String[] args) throws IOException, FrameException, NoSuchAlgorithmException {
        String name = System.getenv().getOrDefault("VIASTACK_TOOL", "transformer");
        Tool.Config config = new Tool.Config(name);
        // On a TLS bus (VIASTACK_BUS_CA: the PEM roots to trust) the transformer verifies the bus,
        // fetches only from the pinned producer and serves its result over TLS (keytool certificate).
        String ca = System.getenv("VIASTACK_BUS_CA");
        if (ca != null && !ca.isEmpty()) {
            config.tlsCa = java.nio.file.Path.of(ca);
            config.tlsName = System.getenv().getOrDefault("VIASTACK_BUS_NAME", "localhost");
        }
        try (Tool tool = Tool.connect(System.getenv("VIASTACK_BUS"), config)) {
            while (true) {
                Frame f = tool.nextRequest();
                switch (f.kind()) {
                    case EVAL -> {
                        Term.Appl transform = (Term.Appl) f.term();
                        Term arg = transform.args().get(0);
                        String how = arg instanceof Term.Ref r
                                ? "by reference from tool " + r.owner() + " at " + r.location()
                                : "by value";
                        long t0 = System.nanoTime();
                        Term.Appl data = (Term.Appl) ((Term.Appl) tool.resolve(transform, f.num("delivery"))).args().get(0);
                        long t1 = System.nanoTime();
                        String digest = ((Term.Str) data.args().get(0)).value();
                        byte[] in = ((Term.Blob) data.args().get(1)).data();
                        byte[] out = new byte[in.length];
                        for (int i = 0; i < in.length; i++) {
                            out[i] = (byte) ~in[i];
                        }
                        String mapped = HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(out));
                        tool.release(transform);
                        long t2 = System.nanoTime();
                        Term result = tool.put(Term.appl("transformed", Term.string("complement"),
                                Term.string(digest), Term.string(mapped), Term.blob(out)));
                        long t3 = System.nanoTime();
                        log(String.format("got %d bytes %s in %d ms (fetches %d), %d over TLS, complemented in %d ms, put %s in %d ms",
                                in.length, how, (t1 - t0) / 1_000_000, tool.fetches(), tool.tlsFetches(), (t2 - t1) / 1_000_000,
                                result instanceof Term.Ref ? "by reference" : "by value", (t3 - t2) / 1_000_000));
                        tool.value(f.num("request"), result);
                    }
                    case FIN -> log("FIN: value " + f.num("var") + " freed (" + tool.held() + " held)");
                    case TERMINATE -> {
                        return;
                    }
                    default -> { }
                }
            }
        }
    }
}
