-- Tether's change tracking for PostgreSQL: what lets a Tether cache ask
-- "what changed since I last looked?" instead of listing a table again.
-- Apply it with psql (psql -f sql/tether-postgres.sql, then
-- SELECT tether.track('myschema');) or with tether_postgres_install, which
-- runs this very text and tracks the options' schema. Applying it again is
-- harmless. It adds no column to any table: all it keeps is in schema tether.
--
-- Every INSERT, UPDATE and DELETE statement on a tracked table runs
-- tether.record_change once (triggers tether_track_insert, _update, _delete,
-- over the statement's transition tables), which
--   * numbers the change from one sequence (tether.change_seq), the order
--     in which a listing of changes pages;
--   * notes the writing transaction (pg_current_xact_id()): a reader's cursor
--     is a transaction horizon, since sequence numbers are taken before
--     commit, out of commit order: a cursor "number <= N" would miss a
--     change numbered below N that commits after the reader looked. A reader
--     asks for the changes of transactions >= its cursor, and its next
--     cursor is the oldest transaction still running when it looked
--     (pg_snapshot_xmin): every older one has ended and is in what it read;
--   * keeps the key of a live row in tether.versions, of a deleted one in
--     tether.tombstones (a key changed by an UPDATE: both);
--   * sends NOTIFY tether_changes with the payload 'schema.table' (quoted as
--     format('%I.%I') quotes), at most once per table per transaction.
-- TRUNCATE (trigger tether_track_truncate) forgets the table's changes and
-- moves tether.tracked.since: caches then list the table again.
-- A row's version as Tether's records show it stays the row's xmin.
-- Tombstones are kept until a DBA deletes them; a cache whose cursor is
-- older than tether.tracked.since lists the table again, so to prune:
--   UPDATE tether.tracked SET since = pg_current_xact_id() WHERE relation = ...;
--   DELETE FROM tether.tombstones WHERE relation = ...;

SET client_min_messages = warning;  -- no notice for what exists already

CREATE SCHEMA IF NOT EXISTS tether;

CREATE SEQUENCE IF NOT EXISTS tether.change_seq AS bigint;

-- The live rows of tracked tables: their last change.
CREATE TABLE IF NOT EXISTS tether.versions (
    relation text NOT NULL,      -- format('%I.%I', schema, table)
    key text NOT NULL,           -- the primary key, as text (key::text)
    version bigint NOT NULL,     -- from tether.change_seq
    xid xid8 NOT NULL,           -- the transaction that made the change
    PRIMARY KEY (relation, key)
);
CREATE INDEX IF NOT EXISTS versions_since ON tether.versions (relation, xid);

-- Rows deleted from tracked tables, by key.
CREATE TABLE IF NOT EXISTS tether.tombstones (
    relation text NOT NULL,
    key text NOT NULL,
    version bigint NOT NULL,
    xid xid8 NOT NULL,
    PRIMARY KEY (relation, key)
);
CREATE INDEX IF NOT EXISTS tombstones_since ON tether.tombstones (relation, xid);

-- The tracked tables, and the transaction from which their changes are all
-- recorded: a cursor older than `since` cannot be answered.
CREATE TABLE IF NOT EXISTS tether.tracked (
    relation text PRIMARY KEY,
    since xid8 NOT NULL
);

CREATE OR REPLACE FUNCTION tether.record_change() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
    rel text := format('%I.%I', TG_TABLE_SCHEMA, TG_TABLE_NAME);
    key_column name;
    changed bigint := 0;
    counted bigint;
BEGIN
    -- The key as it is now (a DBA may have changed it since tether.track).
    IF TG_OP <> 'TRUNCATE' THEN
        SELECT a.attname INTO key_column
        FROM pg_constraint k JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = k.conkey[1]
        WHERE k.conrelid = TG_RELID AND k.contype = 'p' AND cardinality(k.conkey) = 1;
    END IF;
    IF key_column IS NULL THEN
        -- TRUNCATE, or no key of one column to name changes by: caches list the table again.
        UPDATE tether.tracked SET since = pg_current_xact_id() WHERE relation = rel;
        DELETE FROM tether.versions WHERE relation = rel;
        DELETE FROM tether.tombstones WHERE relation = rel;
        PERFORM pg_notify('tether_changes', rel);
        RETURN NULL;
    END IF;
    -- Statement triggers over transition tables (old_rows, new_rows): one
    -- set-based statement each, not a function call per row.
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        EXECUTE format($sql$
            WITH gone AS (SELECT o.%1$I::text AS key FROM old_rows o %2$s),
                 dropped AS (DELETE FROM tether.versions v USING gone WHERE v.relation = $1 AND v.key = gone.key)
            INSERT INTO tether.tombstones SELECT $1, key, nextval('tether.change_seq'), pg_current_xact_id() FROM gone
            ON CONFLICT (relation, key) DO UPDATE SET version = excluded.version, xid = excluded.xid
            $sql$, key_column,
            CASE WHEN TG_OP = 'UPDATE' THEN format('EXCEPT SELECT n.%I::text FROM new_rows n', key_column) ELSE '' END)
        USING rel;
        GET DIAGNOSTICS counted = ROW_COUNT;
        changed := changed + counted;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        EXECUTE format($sql$
            WITH came AS (SELECT n.%1$I::text AS key FROM new_rows n),
                 revived AS (DELETE FROM tether.tombstones d USING came WHERE d.relation = $1 AND d.key = came.key)
            INSERT INTO tether.versions SELECT $1, key, nextval('tether.change_seq'), pg_current_xact_id() FROM came
            ON CONFLICT (relation, key) DO UPDATE SET version = excluded.version, xid = excluded.xid
            $sql$, key_column)
        USING rel;
        GET DIAGNOSTICS counted = ROW_COUNT;
        changed := changed + counted;
    END IF;
    IF changed > 0 THEN
        PERFORM pg_notify('tether_changes', rel);
    END IF;
    RETURN NULL;
END
$body$;

-- Puts the triggers on every ordinary table of `target` with a primary key
-- of one column that lacks them; returns how many tables it put them on.
-- Tables created later are tracked by calling it again.
CREATE OR REPLACE FUNCTION tether.track(target name) RETURNS integer
LANGUAGE plpgsql AS $body$
DECLARE
    t record;
    event text;
    missing boolean;
    added integer := 0;
BEGIN
    FOR t IN
        SELECT c.oid, c.relname FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'p' AND cardinality(k.conkey) = 1
        WHERE n.nspname = target AND c.relkind = 'r' AND NOT c.relispartition
        ORDER BY c.relname
    LOOP
        missing := false;
        FOREACH event IN ARRAY ARRAY['insert', 'update', 'delete', 'truncate'] LOOP
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = t.oid AND tgname = 'tether_track_' || event);
            EXECUTE format('CREATE TRIGGER %I AFTER %s ON %I.%I %s FOR EACH STATEMENT EXECUTE FUNCTION tether.record_change()',
                           'tether_track_' || event, upper(event), target, t.relname,
                           CASE event WHEN 'insert' THEN 'REFERENCING NEW TABLE AS new_rows'
                                      WHEN 'update' THEN 'REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows'
                                      WHEN 'delete' THEN 'REFERENCING OLD TABLE AS old_rows' ELSE '' END);
            missing := true;
        END LOOP;
        CONTINUE WHEN NOT missing;
        -- Changes before now were not all recorded: older cursors list again.
        INSERT INTO tether.tracked VALUES (format('%I.%I', target, t.relname), pg_current_xact_id())
        ON CONFLICT (relation) DO UPDATE SET since = excluded.since;
        added := added + 1;
    END LOOP;
    RETURN added;
END
$body$;
