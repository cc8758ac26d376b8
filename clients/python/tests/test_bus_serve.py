"""Two Python tools against a real `viastack bus serve`: a 3 MB value goes from the producer to
the consumer by reference (fetched once, though sent twice), FIN frees it at the producer.
The binary is $VIASTACK_BIN, or target/{debug,release}/viastack (skipped if absent)."""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..", "..")
sys.path.insert(0, os.path.join(HERE, ".."))

from viastack_bus import Tool, appl, blob, string  # noqa: E402
from viastack_bus.client import OwnerUnverified, _parse_tls_location  # noqa: E402

SCRIPT = """
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
"""


def binary():
    env = os.environ.get("VIASTACK_BIN")
    if env:
        return env
    for target in [os.environ.get("CARGO_TARGET_DIR", ""), os.path.join(ROOT, "target")]:
        for profile in ("debug", "release"):
            p = os.path.join(target, profile, "viastack")
            if target and os.path.exists(p):
                return p
    return None


@unittest.skipIf(binary() is None, "no viastack binary built")
class BusServe(unittest.TestCase):
    def test_value_by_reference_between_python_tools(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pipe.tb")
            with open(path, "w") as f:
                f.write(SCRIPT)
            bus = subprocess.Popen([binary(), "bus", "serve", "--listen", "127.0.0.1:0", path],
                                   stdout=subprocess.PIPE, text=True)
            try:
                addr = bus.stdout.readline().strip().rsplit(" ", 1)[1]
                log = []

                def producer():
                    t = Tool(addr, "producer")
                    while True:
                        kind, f = t.next_request()
                        if kind == "EVAL":
                            v = appl("data", string("big"), blob(bytes(range(256)) * 11719))
                            r = t.put(v)
                            log.append(("ref", r[0]))
                            t.value(f["request"], r)
                        elif kind == "FIN":
                            log.append(("fin", len(t.store)))
                        elif kind == "TERMINATE":
                            return

                def consumer():
                    t = Tool(addr, "consumer", serve=False)
                    while True:
                        kind, f = t.next_request()
                        if kind == "EVAL":
                            v = t.resolve(f["term"], f["delivery"])
                            data = v[2][0][2][1][1]
                            log.append(("got", len(data), data[:3]))
                            t.value(f["request"], appl("ok"))
                        elif kind == "TERMINATE":
                            log.append(("fetches", t.fetches))
                            return

                threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join(60)
                self.assertEqual(bus.wait(60), 0)
            finally:
                if bus.poll() is None:
                    bus.kill()
                bus.stdout.close()
        self.assertIn(("ref", "ref"), log)
        self.assertIn(("got", 256 * 11719, bytes([0, 1, 2])), log)
        self.assertIn(("fetches", 1), log)
        self.assertIn(("fin", 0), log)


    def _run(self, extra, producer_kw, consumer_kw, check_wrong_token=None):
        """The pipeline with `bus serve EXTRA`; returns the log."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pipe.tb")
            with open(path, "w") as f:
                f.write(SCRIPT)
            bus = subprocess.Popen([binary(), "bus", "serve", "--listen", "127.0.0.1:0"]
                                   + extra(d) + [path], stdout=subprocess.PIPE, text=True)
            try:
                addr = bus.stdout.readline().strip().rsplit(" ", 1)[1]
                log = []
                if check_wrong_token:
                    check_wrong_token(addr, d)

                def producer():
                    t = Tool(addr, "producer", **producer_kw(d))
                    while True:
                        kind, f = t.next_request()
                        if kind == "EVAL":
                            v = appl("data", string("big"), blob(bytes(range(256)) * 11719))
                            r = t.put(v)
                            log.append(("ref", r[0], r[4]))
                            t.value(f["request"], r)
                        elif kind == "FIN":
                            log.append(("fin", len(t.store)))
                        elif kind == "TERMINATE":
                            return

                def consumer():
                    t = Tool(addr, "consumer", **consumer_kw(d))
                    while True:
                        kind, f = t.next_request()
                        if kind == "EVAL":
                            v = t.resolve(f["term"], f["delivery"])
                            data = v[2][0][2][1][1]
                            log.append(("got", len(data), data[:3]))
                            t.value(f["request"], appl("ok"))
                        elif kind == "TERMINATE":
                            log.append(("fetches", t.fetches))
                            log.append(("how", t.memfd_fetches, t.tls_fetches))
                            return

                threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join(60)
                self.assertEqual(bus.wait(60), 0)
            finally:
                if bus.poll() is None:
                    bus.kill()
                bus.stdout.close()
        self.assertIn(("got", 256 * 11719, bytes([0, 1, 2])), log)
        self.assertIn(("fetches", 1), log)
        self.assertIn(("fin", 0), log)
        return log

    def test_two_passive_tools_transfer_through_the_bus(self):
        log = self._run(lambda d: [], lambda d: {"serve": False}, lambda d: {"serve": False})
        self.assertIn(("ref", "ref", ""), log)

    @unittest.skipIf(shutil.which("openssl") is None, "no openssl to make a certificate")
    def test_tls_and_token_with_a_passive_owner_relayed(self):
        def cert(d):
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                            "-keyout", os.path.join(d, "key.pem"),
                            "-out", os.path.join(d, "cert.pem")],
                           check=True, capture_output=True)
            return ["--tls-cert", os.path.join(d, "cert.pem"),
                    "--tls-key", os.path.join(d, "key.pem"), "--token", "s3cret"]

        def tls(d, **kw):
            return dict(tls_ca=os.path.join(d, "cert.pem"), token="s3cret", **kw)

        def wrong(addr, d):
            with self.assertRaises(ConnectionError):
                Tool(addr, "consumer", serve=False, tls_ca=os.path.join(d, "cert.pem"),
                     token="guess")
            with self.assertRaises(Exception):
                Tool(addr, "consumer", serve=False, token="s3cret")  # plain TCP

        log = self._run(cert, lambda d: tls(d, serve=False), lambda d: tls(d),
                        check_wrong_token=wrong)
        self.assertIn(("ref", "ref", ""), log)

    @unittest.skipIf(shutil.which("openssl") is None, "no openssl to make a certificate")
    def test_on_a_tls_bus_an_active_owner_serves_tls_pinned_in_its_location(self):
        log = self._run(self._tls_bus, lambda d: self._tls(d), lambda d: self._tls(d))
        refs = [e for e in log if e[0] == "ref"]
        self.assertTrue(refs and refs[0][2].startswith("tls:127.0.0.1:"), refs)
        self.assertTrue(_parse_tls_location(refs[0][2]), refs)
        self.assertIn(("how", 0, 1), log)

    @unittest.skipIf(shutil.which("openssl") is None, "no openssl to make a certificate")
    def test_a_wrong_owner_certificate_or_a_plain_owner_is_refused_on_a_tls_bus(self):
        seen = {}

        def consumer_kw(d):
            return self._tls(d)

        def check(addr, d):
            pass

        original = Tool._fetch

        def tampering(tool, r, delivery):
            # Before the real fetch: the same reference with another pin, and with the
            # owner's plain address; both must be refused and counted.
            if tool.tls_bus and "wrong" not in seen:
                addr, pin = _parse_tls_location(r[4])
                other = bytes([pin[0] ^ 1]) + pin[1:]
                for loc in ("tls:%s;sha256=%s" % (addr, other.hex()), addr):
                    bad = (r[0], r[1], r[2], r[3], loc, r[5])
                    try:
                        original(tool, bad, delivery)
                        seen.setdefault("accepted", []).append(loc)
                    except OwnerUnverified as e:
                        seen.setdefault("wrong", []).append(str(e))
                seen["count"] = tool.unverified_owners
            return original(tool, r, delivery)

        Tool._fetch = tampering
        try:
            log = self._run(self._tls_bus, lambda d: self._tls(d), consumer_kw, check)
        finally:
            Tool._fetch = original
        self.assertNotIn("accepted", seen, seen)
        self.assertEqual(len(seen["wrong"]), 2, seen)
        self.assertIn("does not match", seen["wrong"][0])
        self.assertIn("plain TCP", seen["wrong"][1])
        self.assertEqual(seen["count"], 2)
        self.assertIn(("how", 0, 1), log)

    def test_same_host_values_come_as_a_sealed_memfd(self):
        if not hasattr(os, "memfd_create"):
            self.skipTest("no memfd on this system")
        log = self._run(lambda d: [], lambda d: {"serve": "unix:" + os.path.join(d, "p.sock")},
                        lambda d: {"serve": False})
        self.assertIn(("how", 1, 0), log)
        # An owner that declines (memfd=False) answers FAIL 2: the consumer streams instead.
        log = self._run(lambda d: [], lambda d: {"serve": "unix:" + os.path.join(d, "p.sock"),
                                                 "memfd": False},
                        lambda d: {"serve": False})
        self.assertIn(("how", 0, 0), log)

    def test_a_same_host_part_of_a_location_is_fetched_as_a_memfd(self):
        # A Rust TCP owner announces `BASE;local=BOOT_ID@/socket` (crates/bus/src/client.rs).
        # The Python owner here serves on a Unix socket; the consumer is handed its
        # references rewritten to that form with an unreachable base: the value can only
        # arrive through the same-host part, as a memfd.
        from viastack_bus import client
        if not hasattr(os, "memfd_create") or client.boot_id() is None:
            self.skipTest("no memfd or boot id on this system")
        original = client.Tool._fetch

        def via_local(tool, r, delivery):
            tag, owner, var_id, size, location, sig = r
            if location.startswith("unix:"):
                location = "127.0.0.1:1;local=%s@%s" % (client.boot_id(), location[5:])
            got = original(tool, (tag, owner, var_id, size, location, sig), delivery)
            self.assertEqual(tool.local_fetches, 1)
            return got

        client.Tool._fetch = via_local
        try:
            log = self._run(lambda d: [],
                            lambda d: {"serve": "unix:" + os.path.join(d, "p.sock")},
                            lambda d: {"serve": False})
        finally:
            client.Tool._fetch = original
        self.assertIn(("how", 1, 0), log)

    @staticmethod
    def _tls_bus(d):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                        "-keyout", os.path.join(d, "key.pem"),
                        "-out", os.path.join(d, "cert.pem")],
                       check=True, capture_output=True)
        return ["--tls-cert", os.path.join(d, "cert.pem"), "--tls-key", os.path.join(d, "key.pem")]

    @staticmethod
    def _tls(d, **kw):
        return dict(tls_ca=os.path.join(d, "cert.pem"), **kw)


if __name__ == "__main__":
    unittest.main()
