"""The Python producer of the three-language example (three-languages.tb): on make(N) it
makes N random bytes and answers data(SHA256, BLOB) through `Tool.put`, so above the bus's
threshold the value stays here and only a reference travels; it serves the value to whoever
fetches it and frees it on the bus's FIN."""

import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "clients", "python"))

from viastack_bus import Tool, appl, blob, string  # noqa: E402


def log(msg):
    print("producer (Python): " + msg, file=sys.stderr, flush=True)


def main():
    # On a TLS bus (VIASTACK_BUS_CA: the PEM roots to trust), the value is served over TLS too,
    # pinned in the reference the bus hands on.
    tool = Tool(os.environ["VIASTACK_BUS"], os.environ.get("VIASTACK_TOOL", "producer"),
                tls_ca=os.environ.get("VIASTACK_BUS_CA") or None,
                tls_name=os.environ.get("VIASTACK_BUS_NAME", "localhost"))
    while True:
        kind, f = tool.next_request()
        if kind == "EVAL":
            term = f["term"]  # make(N)
            n = term[2][0][1]
            t0 = time.perf_counter()
            data = os.urandom(n)
            digest = hashlib.sha256(data).hexdigest()
            t1 = time.perf_counter()
            sent = tool.put(appl("data", string(digest), blob(data)))
            t2 = time.perf_counter()
            how = "by reference" if sent[0] == "ref" else "by value"
            log(f"made {n} bytes (sha256 {digest[:16]}…) in {(t1 - t0) * 1e3:.0f} ms, "
                f"put {how} in {(t2 - t1) * 1e3:.0f} ms")
            tool.value(f["request"], sent)
        elif kind == "FIN":
            log(f"FIN: value {f['var']} freed ({len(tool.store)} held)")
        elif kind == "TERMINATE":
            tool.close()
            return


if __name__ == "__main__":
    main()
