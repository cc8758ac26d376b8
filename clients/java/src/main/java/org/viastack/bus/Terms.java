package org.viastack.bus;

import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/** Helpers over terms the client needs: a value's signature, its references, their values. */
public final class Terms {
    private Terms() {}

    /** The shape of a value as a reference carries it: blobs and strings over 64 bytes as placeholders. */
    public static Term signature(Term t) {
        if (t instanceof Term.Blob) {
            return Term.placeholder("blob");
        }
        if (t instanceof Term.Str s && s.value().getBytes(StandardCharsets.UTF_8).length > 64) {
            return Term.placeholder("str");
        }
        if (t instanceof Term.Appl a) {
            return new Term.Appl(a.fun(), map(a.args(), Terms::signature));
        }
        if (t instanceof Term.Lst l) {
            return new Term.Lst(map(l.items(), Terms::signature));
        }
        if (t instanceof Term.Annot a) {
            return new Term.Annot(signature(a.term()), a.annos());
        }
        if (t instanceof Term.Ref r) {
            return r.sig();
        }
        return t;
    }

    /** The distinct references in a term (by owner and variable), in pre-order. */
    public static List<Term.Ref> refs(Term t) {
        List<Term.Ref> out = new ArrayList<>();
        Set<List<Long>> seen = new HashSet<>();
        ArrayDeque<Term> stack = new ArrayDeque<>();
        stack.push(t);
        while (!stack.isEmpty()) {
            Term n = stack.pop();
            if (n instanceof Term.Ref r) {
                if (seen.add(List.of(r.owner(), r.var()))) {
                    out.add(r);
                }
                continue;
            }
            List<Term> kids = n.children();
            for (int k = kids.size() - 1; k >= 0; k--) {
                stack.push(kids.get(k));
            }
        }
        return out;
    }

    /** {@code t} with each reference found in {@code values} (keyed by owner and variable) replaced. */
    public static Term replaceRefs(Term t, Map<List<Long>, Term> values) {
        if (t instanceof Term.Ref r) {
            return values.getOrDefault(List.of(r.owner(), r.var()), t);
        }
        if (t instanceof Term.Appl a) {
            return new Term.Appl(a.fun(), map(a.args(), x -> replaceRefs(x, values)));
        }
        if (t instanceof Term.Lst l) {
            return new Term.Lst(map(l.items(), x -> replaceRefs(x, values)));
        }
        if (t instanceof Term.Annot a) {
            return new Term.Annot(replaceRefs(a.term(), values), a.annos());
        }
        return t;
    }

    private static List<Term> map(List<Term> ts, java.util.function.UnaryOperator<Term> f) {
        List<Term> out = new ArrayList<>(ts.size());
        for (Term t : ts) {
            out.add(f.apply(t));
        }
        return out;
    }
}
