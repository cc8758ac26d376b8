"""The bus vectors in testdata/vectors/bus/ decoded and re-encoded by the Python module."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from viastack_bus import FrameError, decode_frame, decode_term, encode_term, to_text  # noqa: E402
from viastack_bus.wire import DEFAULT_MAX_FRAME, encode_frame  # noqa: E402

VECTORS = os.path.join(HERE, "..", "..", "..", "testdata", "vectors", "bus")


def load(name):
    with open(os.path.join(VECTORS, name)) as f:
        return json.load(f)["vectors"]


class BusVectors(unittest.TestCase):
    def test_valid_frames_decode_to_their_fields_and_reencode(self):
        vectors = load("frames.json")
        self.assertGreaterEqual(len(vectors), 18)
        for v in vectors:
            with self.subTest(v["name"]):
                data = bytes.fromhex(v["hex"])
                kind, fields = decode_frame(data)
                self.assertEqual(fields, v["fields"])
                if kind != "UNKNOWN":
                    _, raw = decode_frame(data, terms_as_text=False)
                    raw = {k: val for k, val in raw.items() if k != "kind"}
                    self.assertEqual(encode_frame(kind, **raw), data)

    def test_invalid_frames_are_refused(self):
        for v in load("invalid.json"):
            with self.subTest(v["name"]):
                with self.assertRaises(FrameError) as cm:
                    decode_frame(bytes.fromhex(v["hex"]), DEFAULT_MAX_FRAME)
                variant = v["error"].split(" ")[0].split("(")[0]
                self.assertEqual(cm.exception.variant, variant)

    def test_term_streams_round_trip(self):
        for v in load("terms.json"):
            with self.subTest(v["name"]):
                data = bytes.fromhex(v["hex"])
                t = decode_term(data)
                self.assertEqual(to_text(t), v["text"])
                self.assertEqual(encode_term(t), data)


if __name__ == "__main__":
    unittest.main()
