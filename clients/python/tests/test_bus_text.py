"""The term text parser (viastack_bus.text) against the shared term vectors
(testdata/vectors/bus/terms.json) and damaged texts, as the Java TermParser's tests do."""

import json
import os
import random
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from viastack_bus import TermParseError, decode_term, encode_term, parse_term, to_text  # noqa: E402
from viastack_bus.term import MAX_DEPTH  # noqa: E402

VECTORS = os.path.join(HERE, "..", "..", "..", "testdata", "vectors", "bus")


def load(name):
    with open(os.path.join(VECTORS, name)) as f:
        return json.load(f)["vectors"]


class TermText(unittest.TestCase):
    def test_every_vector_text_parses_to_the_vectors_term(self):
        vectors = load("terms.json")
        self.assertGreaterEqual(len(vectors), 10)
        for v in vectors:
            with self.subTest(v["name"]):
                data = bytes.fromhex(v["hex"])
                t = parse_term(v["text"])
                self.assertEqual(t, decode_term(data))
                self.assertEqual(encode_term(t), data)
                self.assertEqual(to_text(t), v["text"])
                # White space and comments between tokens do not change the term.
                self.assertEqual(parse_term("  % a comment\n " + v["text"] + "\n\t"), t)

    def test_the_grammar_beyond_the_vectors(self):
        cases = {
            " f( 1 , [ ] ) ": "f(1,[])",
            "f (1)": None,  # the arguments follow the name directly
            "f(\n  1, % one\n  2)": "f(1,2)",
            '"\\x41\\t\\r\\\\"': '"A\\t\\r\\\\"',
            "1e3": "1000.0",
            "-2.5E-1": "-0.25",
            "-.5": "-0.5",
            "x-y-": None,  # the trailing '-' is not part of the name
            "my_fun-2(a)": "my_fun-2(a)",
            "<list>": "<list>",
            "X{a,b}": "X{a,b}",
            "@ref( 1 , 2 , 3 , \"\" , <int> )": '@ref(1,2,3,"",<int>)',
            "9223372036854775807": "9223372036854775807",
            "-9223372036854775808": "-9223372036854775808",
        }
        for src, text in cases.items():
            with self.subTest(src):
                if text is None:
                    with self.assertRaises(TermParseError):
                        parse_term(src)
                else:
                    t = parse_term(src)
                    self.assertEqual(to_text(t), text)
                    self.assertEqual(decode_term(encode_term(t)), t)

    def test_errors_name_the_line_and_column(self):
        bad = [
            ("f(1,", "1:5", "expected a term, found the end"),
            ("f(1 2)", "1:5", "expected ',' or ')'"),
            ('"abc', "1:5", "unterminated string"),
            ('"a\\q"', "1:5", "unknown escape"),
            ('"\\x4"', "1:6", "expected two hex digits after \\x"),
            ('#"0"', "1:5", "invalid hex in blob"),
            ('#"0g"', "1:6", "invalid hex in blob"),
            ("t{}", "1:4", "empty annotation"),
            ("t{a}{b}", "1:5", "expected the end of the term"),
            ("f(\n  @foo(1))", "2:7", "expected 'ref' after '@'"),
            ('@ref(-1,1,1,"",x)', "1:8", "expected a non-negative integer"),
            ('@ref(1.5,1,1,"",x)', "1:9", "expected a non-negative integer"),
            ("99999999999999999999", "1:21", "invalid integer"),
            ("9223372036854775808", "1:20", "invalid integer"),
            ("1" * 5000, "1:5001", "invalid integer"),
            ("1e", "1:3", "invalid real '1e'"),
            ("1e999", "1:6", "invalid real"),
            ("-", "1:2", "invalid integer '-'"),
            ("<int", "1:5", "expected '>'"),
            ("f(x) g", "1:6", "expected the end of the term"),
            ("$", "1:1", "unexpected '$'"),
            ("é", "1:1", "unexpected 'é'"),
            ("[é,\n  ü]", "1:2", "unexpected 'é'"),
            ("\x1c1", "1:1", "unexpected"),  # not Rust white space, though str.isspace says so
            ("", "1:1", "expected a term, found the end"),
        ]
        for src, where, msg in bad:
            with self.subTest(src[:40]):
                with self.assertRaises(TermParseError) as cm:
                    parse_term(src)
                e = cm.exception
                self.assertEqual(f"{e.line}:{e.col}", where, str(e))
                self.assertIn(msg, str(e))
                self.assertTrue(str(e).startswith(where + ": "), str(e))

    def test_nesting_is_bounded_and_the_limit_itself_parses(self):
        ok = "[" * MAX_DEPTH + "]" * MAX_DEPTH
        t = parse_term(ok)
        for _ in range(MAX_DEPTH - 1):
            t = t[1][0]
        self.assertEqual(t, ("list", ()))
        for deep in ("[" * 600 + "]" * 600, "f(" * 600 + ")" * 600, "<" * 600 + ">" * 600,
                     "a{" * 600 + "}" * 600, "[" * 100000):
            with self.subTest(deep[:4]):
                with self.assertRaises(TermParseError) as cm:
                    parse_term(deep)
                self.assertIn("nesting deeper than 512", str(cm.exception))

    def test_damaged_texts_fail_with_a_term_parse_error_only(self):
        rng = random.Random(3)
        alphabet = "()[]<>{},?@#\"\\%-.eE+0123456789abXYref \n\x85é"
        parsed = 0
        for v in load("terms.json"):
            text = v["text"]
            for cut in range(len(text)):
                try:
                    parse_term(text[:cut])
                    parsed += 1
                except TermParseError:
                    pass
            for _ in range(300):
                b = list(text)
                for _ in range(rng.randint(1, 3)):
                    b[rng.randrange(len(b))] = rng.choice(alphabet)
                try:
                    t = parse_term("".join(b))
                except TermParseError:
                    continue
                parsed += 1
                # What parses prints back to a text that parses to the same term.
                self.assertEqual(parse_term(to_text(t)), t)
        self.assertGreater(parsed, 0)


if __name__ == "__main__":
    unittest.main()


class SameHostLocationTest(unittest.TestCase):
    """A Rust owner serving TCP announces a same-host Unix socket after `;local=`; the
    Python client splits it off, fetches there as a memfd on the same host (same boot id),
    and at the base location otherwise."""

    def test_split(self):
        from viastack_bus.client import split_local
        self.assertEqual(split_local("127.0.0.1:5;local=abc@/tmp/x.sock"),
                         ("127.0.0.1:5", ("abc", "/tmp/x.sock")))
        self.assertEqual(split_local("tls:h:5;sha256=00ff;local=abc@/s"),
                         ("tls:h:5;sha256=00ff", ("abc", "/s")))
        self.assertEqual(split_local("127.0.0.1:5"), ("127.0.0.1:5", None))
        self.assertEqual(split_local("unix:/a;local=abc"), ("unix:/a", None))
