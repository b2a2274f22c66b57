"""The hash chain of a server ledger's charges and refunds: the encoding the server's ``append_entry``
hashes (pcqr.pipeline.budget.postgres_functions) and ``pcqr budget verify`` recomputes here.

Charges and refunds are rows of one append-only table, numbered 1, 2, ... under the ledger's lock.
Each row's ``hash`` is SHA-256 of its fields and of the previous row's hash, so an edit by anyone who
could bypass the functions (the database's superuser, the owner) shows unless every later row is
rewritten too.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Any, Sequence

GENESIS = "0" * 64
#: The fields of a chain entry, in the order they are hashed.
ENTRY_FIELDS = ("id", "kind", "identity", "label", "job", "time", "epsilon", "delta", "parameters", "pid",
                "refund_of", "note", "role", "token_hash", "prev_hash")


def field(value: str | None) -> str:
    """One field of a chain entry as hashed: ``~`` for NULL, else its length, a colon and itself."""
    return "~" if value is None else f"{len(value)}:{value}"


def entry_digest(entry: dict[str, Any]) -> str:
    """SHA-256 (hex) of a chain entry: its :data:`ENTRY_FIELDS` in order, each by :func:`field`;
    numbers in decimal, the two doubles as the hex of their big-endian IEEE 754 bytes (exact)."""
    values: list[str | None] = []
    for name in ENTRY_FIELDS:
        value = entry[name]
        if name in ("epsilon", "delta"):
            value = struct.pack(">d", float(value)).hex()
        elif value is not None and not isinstance(value, str):
            value = str(int(value))
        values.append(value)
    return hashlib.sha256("".join(field(v) for v in values).encode()).hexdigest()


def broken_entry(entries: Sequence[dict[str, Any]]) -> tuple[int, str] | None:
    """The first entry (id, why) that breaks the chain -- ids 1, 2, ... in order, each ``prev_hash``
    the hash before it, each ``hash`` its own digest -- or None if the chain holds."""
    previous = GENESIS
    for expected, entry in enumerate(entries, start=1):
        if int(entry["id"]) != expected:
            return int(entry["id"]), f"entry {expected} is missing"
        if entry["prev_hash"] != previous:
            return expected, "its previous hash is not the hash of the entry before it"
        if entry_digest(entry) != entry["hash"]:
            return expected, "its contents do not match its hash"
        previous = entry["hash"]
    return None
