"""The server ledger's schema: tables analysts may read, and the only functions through which they
change them (``pcqr ledger init``).

Separation of duties, enforced by the server (issue 30). The schema ``pcqr`` and everything in it
belong to the budget owner, the role of ``--admin-url``. The analyst roles get USAGE on the schema,
SELECT on its tables, EXECUTE on ``spent`` (a read) and on six SECURITY DEFINER functions that
write: ``charge``, ``refund``,
``store_sketch``, ``register_session``, ``close_session`` and ``advance_session``. They get no
INSERT, UPDATE, DELETE or TRUNCATE on any table, and no ``set_budget``. Those functions run as the
owner with a fixed ``search_path``, and each re-checks the rule it serves. The client's check is the
policy's (pcqr.pipeline.budget.ledger); the server does not take the client's word:

* ``charge`` takes the ledger's lock (one advisory lock per database, which the client's
  transaction also holds). It refuses a charge that would pass the identity's budget under basic
  composition, within the policy's relative tolerance (SQLSTATE PX001). It then appends the charge
  to the chain and returns its id and a refund token: 128 random bits from ``gen_random_uuid``,
  whose SHA-256 the row keeps.
* ``refund`` appends a refund entry, only for the token's holder (the process that charged). It
  refuses a charge that pays for a session that has committed a batch. Typing SQL without the
  token gains no budget (PX003).
* ``register_session`` registers a session at position zero, paid by an unrefunded charge of the
  same identity that pays for no other session (PX004).
* ``advance_session`` is the compare-and-swap of pcqr.pipeline.session.book. It returns false when
  the row is not at the caller's position. It refuses any step that is not exactly one batch
  forward, with c and the stream position never going back and c at most T, and whose record
  disagrees with the position (PX002).

The chain. Charges and refunds are rows of one append-only table, ``charges``, numbered 1, 2, ...
under the lock. Each row's ``hash`` is SHA-256 of its fields and of the previous row's hash, in
the encoding :func:`entry_digest` states. ``pcqr budget verify`` recomputes the chain in Python, so
an edit by anyone who could bypass the functions shows unless the whole chain after it is rewritten
too. Only the database's superuser or the owner can make such an edit; it is outside what the
server protects (docs/privacy.md).

The file-hash cache stays off the server. A cached hash is an analyst machine's word about one of
its files, and a poisoned entry would change a dataset's identity for everyone.
:class:`pcqr.pipeline.budget.postgres_store.PostgresStore` hashes the rows again instead.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Any, Sequence

from pcqr.pipeline.budget.bounds import RELATIVE_TOLERANCE

SCHEMA = "pcqr"
SCHEMA_VERSION = 1
#: The advisory lock every writer of one ledger database holds for its transaction.
LOCK_KEY = 0x70637172
GENESIS = "0" * 64
#: What analysts may call (everything else in the schema is the owner's).
ANALYST_FUNCTIONS = (
    "spent(text)",
    "charge(text, text, text, double precision, double precision, text, integer)",
    "refund(bigint, text, text)",
    "store_sketch(text, text, text, text, bigint, bytea)",
    "register_session(text, text, bigint, integer, bigint, bigint, text, text, text, text, integer)",
    "close_session(text, text)",
    "advance_session(text, bigint, bigint, bigint, text, bigint, bigint, bigint, text, text)",
)
#: The fields of a chain entry, in the order they are hashed.
ENTRY_FIELDS = ("id", "kind", "identity", "label", "job", "time", "epsilon", "delta", "parameters", "pid",
                "refund_of", "note", "role", "token_hash", "prev_hash")

_NOW = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00'"""

TABLES = f"""
CREATE TABLE {SCHEMA}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE {SCHEMA}.budgets (
    identity text PRIMARY KEY, label text NOT NULL, name text UNIQUE,
    epsilon double precision NOT NULL, delta double precision NOT NULL, set_at text NOT NULL);
CREATE TABLE {SCHEMA}.charges (
    id bigint PRIMARY KEY, kind text NOT NULL CHECK (kind IN ('charge', 'refund')),
    identity text NOT NULL, label text NOT NULL, job text NOT NULL, time text NOT NULL,
    epsilon double precision NOT NULL, delta double precision NOT NULL, parameters text NOT NULL,
    pid integer NOT NULL, refund_of bigint UNIQUE REFERENCES {SCHEMA}.charges (id), note text,
    role text NOT NULL, token_hash text, prev_hash text NOT NULL, hash text NOT NULL UNIQUE);
CREATE INDEX charges_by_identity ON {SCHEMA}.charges (identity);
CREATE TABLE {SCHEMA}.sketches (
    identity text NOT NULL, kind text NOT NULL, columns text NOT NULL, label text NOT NULL,
    rows bigint NOT NULL, sketch bytea NOT NULL, stored_at text NOT NULL,
    PRIMARY KEY (identity, kind, columns));
CREATE TABLE {SCHEMA}.sessions (
    session_id text PRIMARY KEY, identity text NOT NULL,
    charge_id bigint NOT NULL UNIQUE REFERENCES {SCHEMA}.charges (id),
    cutoff integer NOT NULL, bottoms bigint NOT NULL, batches bigint NOT NULL,
    last_hash text NOT NULL, prev_hash text NOT NULL, state_path text NOT NULL,
    fixed text NOT NULL, position text NOT NULL, seeded integer NOT NULL,
    created_at text NOT NULL, updated_at text NOT NULL, closed text, role text NOT NULL);
"""

FUNCTIONS = f"""
CREATE FUNCTION {SCHEMA}.field(v text) RETURNS text IMMUTABLE LANGUAGE sql
AS $$ SELECT CASE WHEN v IS NULL THEN '~' ELSE length(v)::text || ':' || v END $$;

CREATE FUNCTION {SCHEMA}.append_entry(
    p_kind text, p_identity text, p_label text, p_job text, p_time text, p_epsilon double precision,
    p_delta double precision, p_parameters text, p_pid integer, p_refund_of bigint, p_note text,
    p_role text, p_token_hash text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
DECLARE
    last record; new_id bigint; prev text; canonical text;
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    SELECT id, hash INTO last FROM charges ORDER BY id DESC LIMIT 1;
    new_id := COALESCE(last.id, 0) + 1;
    prev := COALESCE(last.hash, '{GENESIS}');
    canonical := field(new_id::text) || field(p_kind) || field(p_identity) || field(p_label) || field(p_job)
        || field(p_time) || field(encode(float8send(p_epsilon), 'hex')) || field(encode(float8send(p_delta), 'hex'))
        || field(p_parameters) || field(p_pid::text) || field(p_refund_of::text) || field(p_note) || field(p_role)
        || field(p_token_hash) || field(prev);
    INSERT INTO charges (id, kind, identity, label, job, time, epsilon, delta, parameters, pid, refund_of, note,
                         role, token_hash, prev_hash, hash)
    VALUES (new_id, p_kind, p_identity, p_label, p_job, p_time, p_epsilon, p_delta, p_parameters, p_pid,
            p_refund_of, p_note, p_role, p_token_hash, prev, encode(sha256(convert_to(canonical, 'UTF8')), 'hex'));
    RETURN new_id;
END $$;

CREATE FUNCTION {SCHEMA}.spent(p_identity text, OUT epsilon double precision, OUT delta double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
    SELECT COALESCE(sum(c.epsilon), 0), COALESCE(sum(c.delta), 0) FROM charges c
    WHERE c.kind = 'charge' AND c.identity = p_identity
      AND NOT EXISTS (SELECT 1 FROM charges r WHERE r.refund_of = c.id) $$;

CREATE FUNCTION {SCHEMA}.charge(
    p_identity text, p_label text, p_job text, p_epsilon double precision, p_delta double precision,
    p_parameters text, p_pid integer, OUT charge_id bigint, OUT refund_token text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
DECLARE
    used record; limit_ record;
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    IF p_epsilon IS NULL OR p_delta IS NULL OR NOT (p_epsilon >= 0 AND p_epsilon < 'Infinity'::float8
            AND p_delta >= 0 AND p_delta < 1) THEN
        RAISE EXCEPTION 'cannot charge (%, %): epsilon must be >= 0 and delta in [0, 1)', p_epsilon, p_delta
            USING ERRCODE = 'PX001';
    END IF;
    SELECT * INTO used FROM spent(p_identity);
    SELECT epsilon, delta INTO limit_ FROM budgets WHERE identity = p_identity;
    IF FOUND AND (used.epsilon + p_epsilon > limit_.epsilon * (1 + {RELATIVE_TOLERANCE!r})
                  OR used.delta + p_delta > limit_.delta * (1 + {RELATIVE_TOLERANCE!r})) THEN
        RAISE EXCEPTION 'privacy budget exceeded: spent (%, %) + this job (%, %) > budget (%, %)',
            used.epsilon, used.delta, p_epsilon, p_delta, limit_.epsilon, limit_.delta USING ERRCODE = 'PX001';
    END IF;
    refund_token := replace(gen_random_uuid()::text, '-', '');
    charge_id := append_entry('charge', p_identity, p_label, p_job, {_NOW}, p_epsilon, p_delta, p_parameters,
                              p_pid, NULL, NULL, session_user::text,
                              encode(sha256(convert_to(refund_token, 'UTF8')), 'hex'));
END $$;

CREATE FUNCTION {SCHEMA}.refund(p_charge bigint, p_token text, p_note text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
DECLARE
    paid record;
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    SELECT * INTO paid FROM charges WHERE id = p_charge AND kind = 'charge';
    IF NOT FOUND OR paid.token_hash IS NULL OR p_token IS NULL
            OR paid.token_hash <> encode(sha256(convert_to(p_token, 'UTF8')), 'hex') THEN
        RAISE EXCEPTION 'charge % is refunded only by the process that made it', p_charge USING ERRCODE = 'PX003';
    END IF;
    IF EXISTS (SELECT 1 FROM sessions WHERE charge_id = p_charge AND batches > 0) THEN
        RAISE EXCEPTION 'charge % pays for a session that released batches', p_charge USING ERRCODE = 'PX003';
    END IF;
    IF EXISTS (SELECT 1 FROM charges WHERE refund_of = p_charge) THEN
        RETURN;  -- already refunded: the first note stays
    END IF;
    PERFORM append_entry('refund', paid.identity, paid.label, 'refund', {_NOW}, 0, 0, '{{}}', paid.pid, p_charge,
                         p_note, session_user::text, NULL);
END $$;

CREATE FUNCTION {SCHEMA}.set_budget(
    p_identity text, p_label text, p_name text, p_epsilon double precision, p_delta double precision)
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    INSERT INTO budgets (identity, label, name, epsilon, delta, set_at)
    VALUES (p_identity, p_label, p_name, p_epsilon, p_delta, {_NOW})
    ON CONFLICT (identity) DO UPDATE SET label = EXCLUDED.label, name = COALESCE(EXCLUDED.name, budgets.name),
        epsilon = EXCLUDED.epsilon, delta = EXCLUDED.delta, set_at = EXCLUDED.set_at;
END $$;

CREATE FUNCTION {SCHEMA}.store_sketch(
    p_identity text, p_kind text, p_columns text, p_label text, p_rows bigint, p_sketch bytea) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
    INSERT INTO sketches (identity, kind, columns, label, rows, sketch, stored_at)
    VALUES (p_identity, p_kind, p_columns, p_label, p_rows, p_sketch, {_NOW}) ON CONFLICT DO NOTHING $$;

CREATE FUNCTION {SCHEMA}.register_session(
    p_session text, p_identity text, p_charge bigint, p_cutoff integer, p_bottoms bigint, p_batches bigint,
    p_last_hash text, p_state_path text, p_fixed text, p_position text, p_seeded integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({LOCK_KEY});
    IF p_bottoms <> 0 OR p_batches <> 0 OR (p_position::jsonb ->> 'queries_seen')::bigint <> 0
            OR (p_position::jsonb ->> 'bottoms')::bigint <> 0 OR p_cutoff < 1 THEN
        RAISE EXCEPTION 'session % must be registered at position zero', p_session USING ERRCODE = 'PX004';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM charges c WHERE c.id = p_charge AND c.kind = 'charge' AND c.identity = p_identity
                   AND NOT EXISTS (SELECT 1 FROM charges r WHERE r.refund_of = c.id))
            OR EXISTS (SELECT 1 FROM sessions WHERE charge_id = p_charge) THEN
        RAISE EXCEPTION 'charge % does not pay for a new session of %', p_charge, p_identity USING ERRCODE = 'PX004';
    END IF;
    INSERT INTO sessions (session_id, identity, charge_id, cutoff, bottoms, batches, last_hash, prev_hash,
                          state_path, fixed, position, seeded, created_at, updated_at, closed, role)
    VALUES (p_session, p_identity, p_charge, p_cutoff, 0, 0, p_last_hash, '', p_state_path, p_fixed, p_position,
            p_seeded, {_NOW}, {_NOW}, NULL, session_user::text);
END $$;

CREATE FUNCTION {SCHEMA}.close_session(p_session text, p_note text) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
    UPDATE sessions SET closed = p_note, updated_at = {_NOW} WHERE session_id = p_session AND closed IS NULL $$;

CREATE FUNCTION {SCHEMA}.advance_session(
    p_session text, at_bottoms bigint, at_seen bigint, at_batches bigint, at_hash text,
    new_bottoms bigint, new_seen bigint, new_batches bigint, new_hash text, p_record text) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp AS $$
DECLARE
    row_ record; rec jsonb := p_record::jsonb;
BEGIN
    SELECT * INTO row_ FROM sessions WHERE session_id = p_session FOR UPDATE;
    IF NOT FOUND OR row_.closed IS NOT NULL OR row_.bottoms <> at_bottoms OR row_.batches <> at_batches
            OR row_.last_hash <> at_hash OR (row_.position::jsonb ->> 'queries_seen')::bigint <> at_seen THEN
        RETURN false;
    END IF;
    IF new_batches <> at_batches + 1 OR new_bottoms < at_bottoms OR new_bottoms > row_.cutoff
            OR new_seen < at_seen OR (rec ->> 'bottoms')::bigint IS DISTINCT FROM new_bottoms
            OR (rec ->> 'queries_seen')::bigint IS DISTINCT FROM new_seen
            OR (rec ->> 'next_batch')::bigint IS DISTINCT FROM new_batches
            OR rec ->> 'last_hash' IS DISTINCT FROM new_hash THEN
        RAISE EXCEPTION 'session %: a step from c = % after % batches to c = % after % batches is not valid',
            p_session, at_bottoms, at_batches, new_bottoms, new_batches USING ERRCODE = 'PX002';
    END IF;
    UPDATE sessions SET bottoms = new_bottoms, batches = new_batches, last_hash = new_hash, prev_hash = at_hash,
        position = p_record, updated_at = {_NOW} WHERE session_id = p_session;
    RETURN true;
END $$;
"""


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


def grants(analyst: str) -> list[str]:
    """The statements that give ``analyst`` exactly an analyst's rights (a quoted identifier)."""
    return [f"GRANT USAGE ON SCHEMA {SCHEMA} TO {analyst}",
            f"GRANT SELECT ON ALL TABLES IN SCHEMA {SCHEMA} TO {analyst}",
            *(f"GRANT EXECUTE ON FUNCTION {SCHEMA}.{signature} TO {analyst}" for signature in ANALYST_FUNCTIONS)]


def statements() -> list[str]:
    """The schema's creation, in order (run once, in one transaction, by the owner)."""
    return [f"CREATE SCHEMA {SCHEMA}", f"REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC", TABLES, FUNCTIONS,
            f"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {SCHEMA} FROM PUBLIC",
            f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('schema_version', '{SCHEMA_VERSION}'), "
            f"('created_at', {_NOW})"]
