"""SP v1 header decoder (stdlib only): proves the SP wire format is language-neutral.

The format is documented byte by byte in docs/WIRE.md; the shared hex vectors live in
testdata/vectors/sp/. ``decode`` returns the same fields as ``viastack sp decode``.
"""

from .wire import (
    FLAG_NAMES,
    HEADER_LEN,
    PACKET_TYPES,
    SpDecodeError,
    checksum,
    decode,
    encode,
)

__all__ = [
    "FLAG_NAMES",
    "HEADER_LEN",
    "PACKET_TYPES",
    "SpDecodeError",
    "checksum",
    "decode",
    "encode",
]
