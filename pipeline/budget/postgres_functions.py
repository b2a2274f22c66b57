"""The server ledger's functions: the only way an analyst changes the ledger, written for a hostile
caller (issue 46).

An analyst's role may call ``spent`` (a read) and six SECURITY DEFINER functions that write. They run
as the budget owner with ``search_path = pcqr, pg_temp`` (a temporary table cannot shadow a table of
the schema), and each checks, on the server, whatever its caller sends:

* every argument's type, range and size (:mod:`pcqr.pipeline.budget.bounds`: the client's own
  bounds), refused with SQLSTATE PX005 naming the argument;
* who calls (``session_user``) against who owns what: a charge is refunded, and a session
  registered, advanced or closed, only by the role that made it (PX006);
* the rule it serves (PX001-PX004, PX007 below).

A refused call changes nothing. Notes another analyst may read (a refund's, a closed session's) are
the server's fixed wording (:data:`FAILURE_NOTE`), never the caller's text.

* ``charge(identity, label, job, epsilon, delta, parameters, pid)`` takes the ledger's advisory
  lock, refuses a charge that would pass the identity's budget under basic composition within the
  policy's relative tolerance (PX001), appends it to the hash chain with the caller's role, and
  returns its id and a refund token (128 random bits; the row keeps their SHA-256).
* ``refund(charge, token, invalid_input)``: the caller's own charge, with the token the charge
  returned (PX003 without it). Refused for a charge that pays for a session that released a batch
  (PX003); the session it pays for is closed, and its row locked first, so a concurrent batch
  commit either comes before the refund (which is then refused) or finds the session closed.
* ``store_sketch(identity, kind, columns, label, rows, sketch)``: a dataset's row or feature sketch
  of the documented form (:func:`pcqr.pipeline.budget.bounds.sketch_problem`), by a role that has
  charged that identity. The server keeps one sketch per (identity, kind, columns, role), the
  role's first: no call replaces or removes another role's, every job's overlap check reads them
  all (pcqr.pipeline.budget.overlap), and a budgeted dataset's row sketch is the owner's
  (``set_budget``), so no analyst call can hide a budgeted dataset from that check.
* ``register_session(...)``: at position zero, paid by the caller's own unrefunded charge of the
  same identity, for a session job (train, answer), paying no other session, whose (epsilon,
  delta) is exactly the one the session certifies (PX004).
* ``advance_session(...)``: the compare-and-swap of pcqr.pipeline.session.book. False when the row
  is not at the caller's position, is closed or its charge was refunded; PX002 for a step that is not
  exactly one batch forward, that moves c or the stream position back, passes T, or whose record
  disagrees with the position.
* ``close_session(session, invalid_input)``: the caller's own session; one closed stays closed with
  its first note.

The owner alone (not granted to analysts): ``set_budget(identity, label, name, epsilon, delta,
rows, sketch)`` stores the budget and the dataset's row sketch as the owner's (replacing the
owner's earlier one, beside any an analyst stored); without a sketch it needs one the owner wrote
before (PX007), and a budget below what was spent is refused (PX007).
"""
from __future__ import annotations

from pcqr.pipeline.budget.chain import GENESIS
from pcqr.pipeline.budget.bounds import (
    CONTROL_CLASS, IDENTITY, JOB, JSON_BYTES, MAX_CUTOFF, MAX_EPSILON, RELATIVE_TOLERANCE, SESSION_ID, SESSION_JOBS, SHA256,
    SKETCH_PAIRS, TEXT_CHARS,
)

SCHEMA = "pcqr"
#: The advisory lock every writer of one ledger database holds for its transaction.
LOCK_KEY = 0x70637172
#: The note of a refund, and of a session closed by its job's failure (its time, then this).
FAILURE_NOTE = "{job} failed {on_invalid_input}before releasing anything"
#: Roles that recorded rows without a login of their own: a migration from a SQLite file.
MIGRATED_ROLE = "migrated"

_NOW = """to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') || '+00:00'"""
_LOCK = f"PERFORM pg_advisory_xact_lock({LOCK_KEY});"
_DEFINER = f"SECURITY DEFINER SET search_path = {SCHEMA}, pg_temp"
_TOLERANCE = f"(1 + {RELATIVE_TOLERANCE!r})"

#: What analysts may call (everything else in the schema is the owner's).
ANALYST_FUNCTIONS = (
    "spent(text)",
    "charge(text, text, text, double precision, double precision, text, integer)",
    "refund(bigint, text, boolean)",
    "store_sketch(text, text, text, text, bigint, bytea)",
    "register_session(text, text, bigint, integer, text, text, text, text, integer, double precision, "
    "double precision)",
    "close_session(text, boolean)",
    "advance_session(text, bigint, bigint, bigint, text, bigint, bigint, bigint, text, text)",
)

# Checks of the arguments: owned by the owner, granted to no one, called by the functions above.
_CHECKS = f"""
CREATE FUNCTION {SCHEMA}.field(v text) RETURNS text IMMUTABLE LANGUAGE sql
AS $$ SELECT CASE WHEN v IS NULL THEN '~' ELSE length(v)::text || ':' || v END $$;

CREATE FUNCTION {SCHEMA}.require(ok boolean, what text) RETURNS void IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'invalid argument: %', what USING ERRCODE = 'PX005';
    END IF;
END $$;

-- the caller (session_user) must be the role that made what it touches (PX006)
CREATE FUNCTION {SCHEMA}.require_own(maker text, what text) RETURNS void STABLE LANGUAGE plpgsql AS $$
BEGIN
    IF maker IS DISTINCT FROM session_user::text THEN
        RAISE EXCEPTION '% belongs to role %, which alone may use it', what, maker USING ERRCODE = 'PX006';
    END IF;
END $$;

CREATE FUNCTION {SCHEMA}.is_text(v text) RETURNS boolean IMMUTABLE LANGUAGE sql
AS $$ SELECT v IS NOT NULL AND length(v) BETWEEN 1 AND {TEXT_CHARS} AND v !~ '{CONTROL_CLASS}' $$;

CREATE FUNCTION {SCHEMA}.is_json(v text, kind text) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF v IS NULL OR octet_length(v) > {JSON_BYTES} THEN
        RETURN false;
    END IF;
    RETURN jsonb_typeof(v::jsonb) = kind;
EXCEPTION WHEN data_exception THEN
    RETURN false;
END $$;

CREATE FUNCTION {SCHEMA}.is_column_list(v text) RETURNS boolean IMMUTABLE LANGUAGE plpgsql AS $$
BEGIN
    IF NOT is_json(v, 'array') THEN
        RETURN false;
    END IF;
    RETURN jsonb_array_length(v::jsonb) > 0
        AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(v::jsonb) e WHERE jsonb_typeof(e) <> 'string');
END $$;

-- pairs of little-endian uint64 (value, count): values strictly increasing, counts at least 1
CREATE FUNCTION {SCHEMA}.is_sketch(b bytea) RETURNS boolean IMMUTABLE LANGUAGE sql AS $$
    SELECT b IS NOT NULL AND octet_length(b) % 16 = 0 AND octet_length(b) <= {16 * SKETCH_PAIRS} AND NOT EXISTS (
        SELECT 1 FROM (
            SELECT high, low, counted, lag(high) OVER (ORDER BY i) AS last_high, lag(low) OVER (ORDER BY i) AS last_low
            FROM (SELECT i,
                         (get_byte(b, 16 * i + 7)::bigint << 24) | (get_byte(b, 16 * i + 6) << 16)
                             | (get_byte(b, 16 * i + 5) << 8) | get_byte(b, 16 * i + 4) AS high,
                         (get_byte(b, 16 * i + 3)::bigint << 24) | (get_byte(b, 16 * i + 2) << 16)
                             | (get_byte(b, 16 * i + 1) << 8) | get_byte(b, 16 * i) AS low,
                         substring(b FROM 16 * i + 9 FOR 8) <> '\\x0000000000000000'::bytea AS counted
                  FROM generate_series(0, octet_length(b) / 16 - 1) AS i) AS pairs) AS ordered
        WHERE NOT counted OR (last_high IS NOT NULL AND (high, low) <= (last_high, last_low))) $$;

CREATE FUNCTION {SCHEMA}.failure_note(job text, invalid_input boolean) RETURNS text LANGUAGE sql
AS $$ SELECT {_NOW} || ' ' || job || ' failed ' || CASE WHEN invalid_input THEN 'on invalid input ' ELSE '' END
                 || 'before releasing anything' $$;

CREATE FUNCTION {SCHEMA}.is_owners(role_ text) RETURNS boolean STABLE LANGUAGE sql
AS $$ SELECT role_ = '{MIGRATED_ROLE}' OR role_ = (SELECT pg_get_userbyid(nspowner) FROM pg_namespace
                                                    WHERE nspname = '{SCHEMA}') $$;
"""

_CHAIN = f"""
CREATE FUNCTION {SCHEMA}.append_entry(
    p_kind text, p_identity text, p_label text, p_job text, p_time text, p_epsilon double precision,
    p_delta double precision, p_parameters text, p_pid integer, p_refund_of bigint, p_note text,
    p_role text, p_token_hash text) RETURNS bigint
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    last record; new_id bigint; prev text; canonical text;
BEGIN
    {_LOCK}
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

-- the sums of the identity's unrefunded charges; Infinity where they overflow (rows written before
-- the server bounded each charge)
CREATE FUNCTION {SCHEMA}.spent(p_identity text, OUT epsilon double precision, OUT delta double precision)
LANGUAGE plpgsql STABLE {_DEFINER} AS $$
BEGIN
    SELECT COALESCE(sum(c.epsilon), 0), COALESCE(sum(c.delta), 0) INTO epsilon, delta FROM charges c
    WHERE c.kind = 'charge' AND c.identity = p_identity
      AND NOT EXISTS (SELECT 1 FROM charges r WHERE r.refund_of = c.id);
EXCEPTION WHEN numeric_value_out_of_range THEN
    epsilon := 'Infinity';
    delta := 'Infinity';
END $$;
"""

_BUDGETS = f"""
CREATE FUNCTION {SCHEMA}.charge(
    p_identity text, p_label text, p_job text, p_epsilon double precision, p_delta double precision,
    p_parameters text, p_pid integer, OUT charge_id bigint, OUT refund_token text)
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    used record; limit_ record;
BEGIN
    PERFORM require(p_identity ~ '{IDENTITY}', 'identity (rows: or sha256: and 64 hex digits)');
    PERFORM require(is_text(p_label), 'label (1 to {TEXT_CHARS} characters, no control character)');
    PERFORM require(p_job ~ '{JOB}', 'job (a job''s name, not refund)');
    PERFORM require(p_epsilon >= 0 AND p_epsilon <= {MAX_EPSILON!r}, 'epsilon (in [0, {MAX_EPSILON:g}])');
    PERFORM require(p_delta >= 0 AND p_delta < 1, 'delta (in [0, 1))');
    PERFORM require(is_json(p_parameters, 'object'), 'parameters (a JSON object of at most {JSON_BYTES} bytes)');
    PERFORM require(p_pid >= 0, 'pid');
    {_LOCK}
    SELECT * INTO used FROM spent(p_identity);
    SELECT epsilon, delta INTO limit_ FROM budgets WHERE identity = p_identity;
    IF FOUND AND (used.epsilon + p_epsilon > limit_.epsilon * {_TOLERANCE}
                  OR used.delta + p_delta > limit_.delta * {_TOLERANCE}) THEN
        RAISE EXCEPTION 'privacy budget exceeded: spent (%, %) + this job (%, %) > budget (%, %)',
            used.epsilon, used.delta, p_epsilon, p_delta, limit_.epsilon, limit_.delta USING ERRCODE = 'PX001';
    END IF;
    refund_token := replace(gen_random_uuid()::text, '-', '');
    charge_id := append_entry('charge', p_identity, p_label, p_job, {_NOW}, p_epsilon, p_delta, p_parameters,
                              p_pid, NULL, NULL, session_user::text,
                              encode(sha256(convert_to(refund_token, 'UTF8')), 'hex'));
END $$;

CREATE FUNCTION {SCHEMA}.refund(p_charge bigint, p_token text, p_invalid_input boolean) RETURNS void
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    paid record; note_ text;
BEGIN
    PERFORM require(p_charge IS NOT NULL, 'charge (an id)');
    PERFORM require(p_invalid_input IS NOT NULL, 'invalid_input (true or false)');
    {_LOCK}
    SELECT * INTO paid FROM charges WHERE id = p_charge AND kind = 'charge';
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no charge %', p_charge USING ERRCODE = 'PX003';
    END IF;
    PERFORM require_own(paid.role, format('charge %s', p_charge));
    IF paid.token_hash IS NULL OR p_token IS NULL
            OR paid.token_hash <> encode(sha256(convert_to(p_token, 'UTF8')), 'hex') THEN
        RAISE EXCEPTION 'charge % is refunded only by the process that made it', p_charge USING ERRCODE = 'PX003';
    END IF;
    PERFORM 1 FROM sessions WHERE charge_id = p_charge FOR UPDATE;  -- a batch commit waits for this refund
    IF EXISTS (SELECT 1 FROM sessions WHERE charge_id = p_charge AND batches > 0) THEN
        RAISE EXCEPTION 'charge % pays for a session that released batches', p_charge USING ERRCODE = 'PX003';
    END IF;
    IF EXISTS (SELECT 1 FROM charges WHERE refund_of = p_charge) THEN
        RETURN;  -- already refunded: the first note stays
    END IF;
    note_ := failure_note(paid.job, p_invalid_input);
    UPDATE sessions SET closed = note_, updated_at = {_NOW} WHERE charge_id = p_charge AND closed IS NULL;
    PERFORM append_entry('refund', paid.identity, paid.label, 'refund', {_NOW}, 0, 0, '{{}}', paid.pid, p_charge,
                         note_, session_user::text, NULL);
END $$;

CREATE FUNCTION {SCHEMA}.store_sketch(
    p_identity text, p_kind text, p_columns text, p_label text, p_rows bigint, p_sketch bytea) RETURNS void
LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
    PERFORM require(p_identity ~ '{IDENTITY}', 'identity (rows: or sha256: and 64 hex digits)');
    PERFORM require(p_kind IN ('rows', 'features'), 'kind (rows or features)');
    PERFORM require(CASE WHEN p_kind = 'rows' THEN p_columns = '' ELSE is_column_list(p_columns) END,
                    'columns ('''' for rows, a JSON list of column names for features)');
    PERFORM require(is_text(p_label), 'label (1 to {TEXT_CHARS} characters, no control character)');
    PERFORM require(p_rows >= 0, 'rows (at least 0)');
    IF session_user <> current_user AND NOT EXISTS (
            SELECT 1 FROM charges WHERE identity = p_identity AND kind = 'charge' AND role = session_user::text) THEN
        RAISE EXCEPTION 'role % stores a sketch only of a dataset it has charged', session_user USING ERRCODE = 'PX006';
    END IF;
    IF EXISTS (SELECT 1 FROM sketches WHERE identity = p_identity AND kind = p_kind AND columns = p_columns
               AND role = session_user::text) THEN
        RETURN;  -- this role's first is kept: the form of the one sent need not be checked
    END IF;
    PERFORM require(is_sketch(p_sketch), 'sketch (at most {SKETCH_PAIRS} pairs of little-endian uint64 value '
                    'and count, values increasing, counts at least 1)');
    INSERT INTO sketches (identity, kind, columns, label, rows, sketch, stored_at, role)
    VALUES (p_identity, p_kind, p_columns, p_label, p_rows, p_sketch, {_NOW}, session_user::text)
    ON CONFLICT DO NOTHING;
END $$;

CREATE FUNCTION {SCHEMA}.set_budget(
    p_identity text, p_label text, p_name text, p_epsilon double precision, p_delta double precision,
    p_rows bigint, p_sketch bytea) RETURNS void
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    used record;
BEGIN
    PERFORM require(p_identity ~ '{IDENTITY}', 'identity (rows: or sha256: and 64 hex digits)');
    PERFORM require(is_text(p_label), 'label (1 to {TEXT_CHARS} characters, no control character)');
    PERFORM require(p_name IS NULL OR is_text(p_name), 'name (1 to {TEXT_CHARS} characters, no control character)');
    PERFORM require(p_epsilon > 0 AND p_epsilon <= {MAX_EPSILON!r}, 'epsilon (in (0, {MAX_EPSILON:g}])');
    PERFORM require(p_delta >= 0 AND p_delta < 1, 'delta (in [0, 1))');
    PERFORM require((p_sketch IS NULL AND p_rows IS NULL) OR (is_sketch(p_sketch) AND p_rows >= 0),
                    'sketch (the dataset''s row sketch and its rows, or neither)');
    {_LOCK}
    SELECT * INTO used FROM spent(p_identity);
    IF used.epsilon > p_epsilon * {_TOLERANCE} OR used.delta > p_delta * {_TOLERANCE} THEN
        RAISE EXCEPTION 'budget (%, %) is below what % has spent (%, %)', p_epsilon, p_delta, p_label, used.epsilon,
            used.delta USING ERRCODE = 'PX007';
    END IF;
    IF p_name IS NOT NULL AND EXISTS (SELECT 1 FROM budgets WHERE name = p_name AND identity <> p_identity) THEN
        RAISE EXCEPTION 'name % already names another dataset', p_name USING ERRCODE = 'PX007';
    END IF;
    IF p_sketch IS NOT NULL THEN
        INSERT INTO sketches (identity, kind, columns, label, rows, sketch, stored_at, role)
        VALUES (p_identity, 'rows', '', p_label, p_rows, p_sketch, {_NOW}, session_user::text)
        ON CONFLICT (identity, kind, columns, role) DO UPDATE SET label = EXCLUDED.label, rows = EXCLUDED.rows,
            sketch = EXCLUDED.sketch, stored_at = EXCLUDED.stored_at;
    ELSIF p_identity LIKE 'rows:%' AND NOT EXISTS (
            SELECT 1 FROM sketches WHERE identity = p_identity AND kind = 'rows' AND columns = '' AND is_owners(role)) THEN
        RAISE EXCEPTION 'the budget of % needs the row sketch of its data, which the server does not hold from the '
            'budget owner: set it with the dataset''s path, not its name', p_label USING ERRCODE = 'PX007';
    END IF;
    INSERT INTO budgets (identity, label, name, epsilon, delta, set_at)
    VALUES (p_identity, p_label, p_name, p_epsilon, p_delta, {_NOW})
    ON CONFLICT (identity) DO UPDATE SET label = EXCLUDED.label, name = COALESCE(EXCLUDED.name, budgets.name),
        epsilon = EXCLUDED.epsilon, delta = EXCLUDED.delta, set_at = EXCLUDED.set_at;
END $$;
"""

_SESSIONS = f"""
CREATE FUNCTION {SCHEMA}.register_session(
    p_session text, p_identity text, p_charge bigint, p_cutoff integer, p_last_hash text, p_state_path text,
    p_fixed text, p_position text, p_seeded integer, p_epsilon double precision, p_delta double precision)
RETURNS void LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    paid record; position_ jsonb;
BEGIN
    PERFORM require(p_session ~ '{SESSION_ID}', 'session (1 to 128 letters, digits, _ . -)');
    PERFORM require(p_identity ~ '{IDENTITY}', 'identity (rows: or sha256: and 64 hex digits)');
    PERFORM require(p_charge IS NOT NULL, 'charge (an id)');
    PERFORM require(p_cutoff BETWEEN 1 AND {MAX_CUTOFF}, 'cutoff (T in [1, {MAX_CUTOFF}])');
    PERFORM require(p_last_hash = '' OR p_last_hash ~ '{SHA256}', 'last_hash (empty or a SHA-256 in hex)');
    PERFORM require(is_text(p_state_path), 'state_path (1 to {TEXT_CHARS} characters, no control character)');
    PERFORM require(p_fixed ~ '{SHA256}', 'fixed (a SHA-256 in hex)');
    PERFORM require(is_json(p_position, 'object'), 'position (a JSON object of at most {JSON_BYTES} bytes)');
    PERFORM require(p_seeded IN (0, 1), 'seeded (0 or 1)');
    PERFORM require(p_epsilon >= 0 AND p_epsilon <= {MAX_EPSILON!r} AND p_delta >= 0 AND p_delta < 1,
                    'epsilon and delta (the session''s certificate)');
    position_ := p_position::jsonb;
    IF position_ -> 'bottoms' IS DISTINCT FROM '0'::jsonb OR position_ -> 'queries_seen' IS DISTINCT FROM '0'::jsonb
            OR position_ -> 'next_batch' IS DISTINCT FROM '0'::jsonb THEN
        RAISE EXCEPTION 'session % must be registered at position zero', p_session USING ERRCODE = 'PX004';
    END IF;
    {_LOCK}
    SELECT * INTO paid FROM charges WHERE id = p_charge AND kind = 'charge' AND identity = p_identity;
    IF FOUND THEN  -- a session is paid by its own role's charge
        PERFORM require_own(paid.role, format('charge %s', p_charge));
    END IF;
    IF NOT FOUND OR EXISTS (SELECT 1 FROM charges WHERE refund_of = p_charge)
            OR EXISTS (SELECT 1 FROM sessions WHERE charge_id = p_charge) THEN
        RAISE EXCEPTION 'charge % does not pay for a new session of %', p_charge, p_identity USING ERRCODE = 'PX004';
    END IF;
    IF paid.job NOT IN {SESSION_JOBS!r} THEN
        RAISE EXCEPTION 'charge % paid for job %, not a session', p_charge, paid.job USING ERRCODE = 'PX004';
    END IF;
    IF paid.epsilon <> p_epsilon OR paid.delta <> p_delta THEN
        RAISE EXCEPTION 'charge % paid (%, %), not the (%, %) session % certifies', p_charge, paid.epsilon,
            paid.delta, p_epsilon, p_delta, p_session USING ERRCODE = 'PX004';
    END IF;
    IF EXISTS (SELECT 1 FROM sessions WHERE session_id = p_session) THEN
        RAISE EXCEPTION 'session % is registered already', p_session USING ERRCODE = 'PX004';
    END IF;
    INSERT INTO sessions (session_id, identity, charge_id, cutoff, bottoms, batches, last_hash, prev_hash,
                          state_path, fixed, position, seeded, created_at, updated_at, closed, role)
    VALUES (p_session, p_identity, p_charge, p_cutoff, 0, 0, p_last_hash, '', p_state_path, p_fixed, position_::text,
            p_seeded, {_NOW}, {_NOW}, NULL, session_user::text);
END $$;

CREATE FUNCTION {SCHEMA}.close_session(p_session text, p_invalid_input boolean) RETURNS void
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    row_ record;
BEGIN
    PERFORM require(p_session IS NOT NULL, 'session (an id)');
    PERFORM require(p_invalid_input IS NOT NULL, 'invalid_input (true or false)');
    SELECT * INTO row_ FROM sessions WHERE session_id = p_session FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no session %', p_session USING ERRCODE = 'PX002';
    END IF;
    PERFORM require_own(row_.role, format('session %s', p_session));
    IF row_.closed IS NULL THEN  -- one closed already keeps its note
        UPDATE sessions SET closed = failure_note((SELECT job FROM charges WHERE id = row_.charge_id), p_invalid_input),
            updated_at = {_NOW} WHERE session_id = p_session;
    END IF;
END $$;

CREATE FUNCTION {SCHEMA}.advance_session(
    p_session text, at_bottoms bigint, at_seen bigint, at_batches bigint, at_hash text,
    new_bottoms bigint, new_seen bigint, new_batches bigint, new_hash text, p_record text) RETURNS boolean
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    row_ record; record_ jsonb;
BEGIN
    PERFORM require(p_session IS NOT NULL AND at_bottoms IS NOT NULL AND at_seen IS NOT NULL AND at_batches IS NOT NULL
                    AND at_hash IS NOT NULL AND new_bottoms IS NOT NULL AND new_seen IS NOT NULL
                    AND new_batches IS NOT NULL, 'session and positions (none NULL)');
    PERFORM require(new_hash ~ '{SHA256}', 'new_hash (a SHA-256 in hex)');
    PERFORM require(is_json(p_record, 'object'), 'record (a JSON object of at most {JSON_BYTES} bytes)');
    record_ := p_record::jsonb;
    SELECT * INTO row_ FROM sessions WHERE session_id = p_session FOR UPDATE;
    IF FOUND THEN
        PERFORM require_own(row_.role, format('session %s', p_session));
    END IF;
    IF NOT FOUND OR row_.closed IS NOT NULL OR row_.bottoms <> at_bottoms OR row_.batches <> at_batches
            OR row_.last_hash <> at_hash OR row_.position::jsonb -> 'queries_seen' IS DISTINCT FROM to_jsonb(at_seen)
            OR EXISTS (SELECT 1 FROM charges WHERE refund_of = row_.charge_id) THEN
        RETURN false;
    END IF;
    IF new_batches <> at_batches + 1 OR new_bottoms < at_bottoms OR new_bottoms > row_.cutoff
            OR new_seen < at_seen OR record_ -> 'bottoms' IS DISTINCT FROM to_jsonb(new_bottoms)
            OR record_ -> 'queries_seen' IS DISTINCT FROM to_jsonb(new_seen)
            OR record_ -> 'next_batch' IS DISTINCT FROM to_jsonb(new_batches)
            OR record_ -> 'last_hash' IS DISTINCT FROM to_jsonb(new_hash) THEN
        RAISE EXCEPTION 'session %: a step from c = % after % batches to c = % after % batches is not valid',
            p_session, at_bottoms, at_batches, new_bottoms, new_batches USING ERRCODE = 'PX002';
    END IF;
    UPDATE sessions SET bottoms = new_bottoms, batches = new_batches, last_hash = new_hash, prev_hash = at_hash,
        position = record_::text, updated_at = {_NOW} WHERE session_id = p_session;  -- as checked: one value a key
    RETURN true;
END $$;
"""

#: Every function of the schema, in the order they are created.
FUNCTIONS = _CHECKS + _CHAIN + _BUDGETS + _SESSIONS
