"""The server ledger's schema: tables analysts may read, and the functions through which alone they
change them (:mod:`pcqr.pipeline.budget.postgres_functions`), created by ``pcqr ledger init``.

Separation of duties, enforced by the server (issues 30 and 46). The schema ``pcqr`` and everything
in it belong to the budget owner, the role of ``--admin-url``. The analyst roles get USAGE on the
schema, SELECT on its tables and EXECUTE on :data:`ANALYST_FUNCTIONS`; no INSERT, UPDATE, DELETE or
TRUNCATE on any table, no ``set_budget`` and no helper. The client's checks are the policy's
(pcqr.pipeline.budget.ledger); the server does not take the client's word.

Versions. Version 1 (issue 30) took its callers' word on who they were and on the size of what they
sent (issue 46). Version 2 checks both, records who wrote each sketch, and writes the notes others
read itself. ``pcqr ledger init`` creates version 2, and upgrades a version 1 ledger in place, in one
transaction (:func:`upgrade_statements`): its tables and hash chain are kept, its functions
replaced, its analysts granted again, and sketches that are not of the documented form removed.

The file-hash cache stays off the server. A cached hash is an analyst machine's word about one of
its files, and a poisoned entry would change a dataset's identity for everyone.
:class:`pcqr.pipeline.budget.postgres_store.PostgresStore` hashes the rows again instead.
"""
from __future__ import annotations

from pcqr.pipeline.budget.postgres_functions import ANALYST_FUNCTIONS, FUNCTIONS, SCHEMA

SCHEMA_VERSION = 2
#: The versions ``pcqr ledger init`` upgrades in place.
UPGRADABLE = (1,)

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
    rows bigint NOT NULL, sketch bytea NOT NULL, stored_at text NOT NULL, role text NOT NULL,
    PRIMARY KEY (identity, kind, columns, role));
CREATE TABLE {SCHEMA}.sessions (
    session_id text PRIMARY KEY, identity text NOT NULL,
    charge_id bigint NOT NULL UNIQUE REFERENCES {SCHEMA}.charges (id),
    cutoff integer NOT NULL, bottoms bigint NOT NULL, batches bigint NOT NULL,
    last_hash text NOT NULL, prev_hash text NOT NULL, state_path text NOT NULL,
    fixed text NOT NULL, position text NOT NULL, seeded integer NOT NULL,
    created_at text NOT NULL, updated_at text NOT NULL, closed text, role text NOT NULL);
"""


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


#: The roles granted an analyst's rights on a ledger: those that may execute its ``charge``.
ANALYSTS = f"""SELECT DISTINCT pg_get_userbyid(a.grantee) FROM pg_proc p, aclexplode(p.proacl) a
WHERE p.pronamespace = '{SCHEMA}'::regnamespace AND p.proname = 'charge' AND a.privilege_type = 'EXECUTE'
  AND a.grantee <> p.proowner AND a.grantee <> 0 ORDER BY 1"""

#: The sketches a version 1 server stored without checking their form, which version 2 refuses.
MALFORMED_SKETCHES = f"NOT (CASE WHEN kind = 'legacy' THEN sketch = ''::bytea ELSE {SCHEMA}.is_sketch(sketch) END)"


def upgrade_statements() -> list[str]:
    """Version 1 to 2, in one transaction of the owner, after :data:`ANALYSTS` was read (the old
    functions' grants go with them) and before the analysts are granted again and
    :data:`MALFORMED_SKETCHES` removed: the tables and the chain are kept."""
    return [f"ALTER TABLE {SCHEMA}.sketches ADD COLUMN role text NOT NULL DEFAULT ''",  # '': stored before version 2
            f"ALTER TABLE {SCHEMA}.sketches ALTER COLUMN role DROP DEFAULT",
            f"ALTER TABLE {SCHEMA}.sketches DROP CONSTRAINT sketches_pkey",
            f"ALTER TABLE {SCHEMA}.sketches ADD PRIMARY KEY (identity, kind, columns, role)",
            f"""DO $$ DECLARE f regprocedure; BEGIN
                FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.pronamespace = '{SCHEMA}'::regnamespace LOOP
                    EXECUTE 'DROP FUNCTION ' || f::text;
                END LOOP; END $$""",
            FUNCTIONS,
            f"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {SCHEMA} FROM PUBLIC",
            f"UPDATE {SCHEMA}.meta SET value = '{SCHEMA_VERSION}' WHERE key = 'schema_version'",
            f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('upgraded_at', {_NOW}) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"]


#: Why role ``%(role)s`` could make itself the budget owner ``%(owner)s``, or NULL: the roles it is
#: or can become (membership, with or without INHERIT: SET ROLE reaches them) that hold SUPERUSER,
#: CREATEROLE (which grants itself any role), CREATEDB, REPLICATION or BYPASSRLS, or are the owner
#: (at most three named, the role itself first).
ESCALATIONS = """SELECT array_to_string((array_agg(r.rolname || ' has ' || concat_ws(', ',
    CASE WHEN r.rolsuper THEN 'SUPERUSER' END, CASE WHEN r.rolcreaterole THEN 'CREATEROLE' END,
    CASE WHEN r.rolcreatedb THEN 'CREATEDB' END, CASE WHEN r.rolreplication THEN 'REPLICATION' END,
    CASE WHEN r.rolbypassrls THEN 'BYPASSRLS' END, CASE WHEN r.rolname = %(owner)s THEN 'the budget owner''s rights' END)
    ORDER BY r.rolname <> %(role)s, r.rolname))[1:3], '; ')
FROM pg_roles r
WHERE pg_has_role(%(role)s, r.oid, 'MEMBER')
  AND (r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolreplication OR r.rolbypassrls OR r.rolname = %(owner)s)"""
