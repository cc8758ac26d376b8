"""The SP vectors in testdata/vectors/sp/ decoded by the Python module (stdlib only)."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from viastack_sp import SpDecodeError, checksum, decode, encode  # noqa: E402

VECTORS = os.path.join(HERE, "..", "..", "..", "testdata", "vectors", "sp")


def load():
    out = []
    for name in sorted(os.listdir(VECTORS)):
        if name.endswith(".json"):
            with open(os.path.join(VECTORS, name)) as f:
                for v in json.load(f)["vectors"]:
                    out.append((name, v))
    return out


class SpVectors(unittest.TestCase):
    def test_there_are_vectors_of_every_kind(self):
        files = {name for name, _ in load()}
        self.assertEqual(files, {"types.json", "flags.json", "invalid.json"})
        self.assertGreater(len(load()), 40)

    def test_valid_vectors_decode_to_their_fields(self):
        for name, v in load():
            if "error" in v:
                continue
            with self.subTest(file=name, vector=v["name"]):
                packet = bytes.fromhex(v["hex"])
                self.assertEqual(decode(packet, strict=True), v["fields"])
                self.assertEqual(packet[20:].hex(), v["payload_hex"])

    def test_valid_vectors_reencode_byte_for_byte(self):
        for name, v in load():
            if "error" in v:
                continue
            with self.subTest(file=name, vector=v["name"]):
                packet = bytes.fromhex(v["hex"])
                self.assertEqual(encode(v["fields"], packet[20:]), packet)

    def test_invalid_vectors_name_their_field(self):
        for name, v in load():
            if "error" not in v:
                continue
            with self.subTest(file=name, vector=v["name"]):
                with self.assertRaises(SpDecodeError) as cm:
                    decode(bytes.fromhex(v["hex"]), strict=True)
                self.assertEqual(cm.exception.field, v["error"])
                if "fields" in v:
                    self.assertEqual(decode(bytes.fromhex(v["hex"])), v["fields"])

    def test_rfc1071_example(self):
        self.assertEqual(checksum(bytes.fromhex("0001f203f4f5f6f7")), ~0xDDF2 & 0xFFFF)


if __name__ == "__main__":
    unittest.main()
