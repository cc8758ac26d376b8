"""SP v1: a 20-byte header in network byte order, then the payload (docs/WIRE.md).

Bytes 0-1 DEST_ID, 2-3 SRC_ID, 4 PK_TYPE (high 4 bits) | PRI (2) | CB (2), 5 FLAGS,
6-7 CHKSUM (RFC 1071 over the header with CHKSUM = 0, plus the payload when ST_CKS is set),
8-9 TOTAL_LEN (header + payload), 10 PBLOCK, 11 TBLOCK, 12-13 MESS_SEQ_NO, 14-15 MESS_ACK_NO,
16 SYNC_NO, 17-19 WINDOW_SIZE (24 bits).
"""

import struct

HEADER_LEN = 20

PACKET_TYPES = ["START", "REJ", "CNTRL", "DATA", "ACK", "NACK", "ECHO", "END", "CQOS"]

# Most significant bit first.
FLAG_NAMES = [
    "WINDOW_VALID",
    "ST_CKS",
    "ST_RTR",
    "ST_RETRANS",
    "REMOTE_RESET",
    "REPLY_REQUESTED",
    "REPLY",
    "END_MESSAGE",
]
ST_CKS = 0x40


class SpDecodeError(ValueError):
    """A packet the decoder refuses; ``field`` names the invalid field."""

    def __init__(self, field, message):
        super().__init__("invalid %s: %s" % (field, message))
        self.field = field


def checksum(data):
    """RFC 1071 Internet checksum of ``data`` (odd length padded with a zero byte)."""
    if len(data) % 2:
        data = bytes(data) + b"\x00"
    total = 0
    for (word,) in struct.iter_unpack("!H", data):
        total += word
    while total > 0xFFFF:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _computed_checksum(packet, flags):
    covered = packet[:6] + b"\x00\x00" + packet[8:HEADER_LEN]
    if flags & ST_CKS:
        covered += packet[HEADER_LEN:]
    return checksum(covered)


def decode(packet, strict=False):
    """Decodes one SP packet into a dict with the fields of ``viastack sp decode``.

    Raises SpDecodeError naming the field: "length" (shorter than the header), "total_len"
    (TOTAL_LEN differs from the packet's length), "type" (PK_TYPE 9-15) and, when ``strict``,
    "checksum".
    """
    packet = bytes(packet)
    if len(packet) < HEADER_LEN:
        raise SpDecodeError("length", "%d bytes, the SP header needs %d" % (len(packet), HEADER_LEN))
    (dest_id, src_id, tpc, flags, chk, total_len, pblock, tblock, seq, ack, sync) = struct.unpack(
        "!HHBBHHBBHHB", packet[:17]
    )
    window = int.from_bytes(packet[17:20], "big")
    if total_len != len(packet):
        raise SpDecodeError("total_len", "field says %d bytes, packet has %d" % (total_len, len(packet)))
    ptype = tpc >> 4
    if ptype >= len(PACKET_TYPES):
        raise SpDecodeError("type", "%d is not an SP packet type (0-8)" % ptype)
    ok = _computed_checksum(packet, flags) == chk
    if strict and not ok:
        raise SpDecodeError("checksum", "field is 0x%04x" % chk)
    return {
        "dest_id": dest_id,
        "src_id": src_id,
        "type": PACKET_TYPES[ptype],
        "priority": (tpc >> 2) & 3,
        "cb": tpc & 3,
        "flags": [n for i, n in enumerate(FLAG_NAMES) if flags & (0x80 >> i)],
        "checksum": chk,
        "checksum_ok": ok,
        "total_len": total_len,
        "pblock": pblock,
        "tblock": tblock,
        "mess_seq_no": seq,
        "mess_ack_no": ack,
        "sync_no": sync,
        "window_size": window,
        "payload_len": len(packet) - HEADER_LEN,
    }


def encode(fields, payload=b""):
    """Builds a packet from a dict shaped like ``decode``'s result (checksum computed)."""
    flags = 0
    for name in fields.get("flags", []):
        flags |= 0x80 >> FLAG_NAMES.index(name)
    tpc = (PACKET_TYPES.index(fields["type"]) << 4) | ((fields.get("priority", 0) & 3) << 2) | (fields.get("cb", 0) & 3)
    head = struct.pack(
        "!HHBBHHBBHHB",
        fields.get("dest_id", 0),
        fields.get("src_id", 0),
        tpc,
        flags,
        0,
        HEADER_LEN + len(payload),
        fields.get("pblock", 0),
        fields.get("tblock", 0),
        fields.get("mess_seq_no", 0),
        fields.get("mess_ack_no", 0),
        fields.get("sync_no", 0),
    ) + (fields.get("window_size", 0) & 0xFFFFFF).to_bytes(3, "big")
    packet = head + bytes(payload)
    chk = _computed_checksum(packet, flags)
    return packet[:6] + struct.pack("!H", chk) + packet[8:]
