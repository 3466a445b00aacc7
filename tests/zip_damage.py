"""Single-byte damages to a zip archive (an .npz) that zipfile answers with
NotImplementedError rather than BadZipFile: in the first central directory
header, the version needed to extract, the flags (bit 5, "compressed patched
data") and the compression method."""

# name -> (offset from the header's signature b"PK\x01\x02", bits to flip)
FIELDS = {"version": (6, 0xFF), "flags": (8, 0x20), "method": (10, 0xFF)}


def damaged(data, name):
    """data (the bytes of a zip archive) with the named field changed."""
    offset, bits = FIELDS[name]
    data = bytearray(data)
    data[data.index(b"PK\x01\x02") + offset] ^= bits
    return bytes(data)
