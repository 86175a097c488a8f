-- The demo data of docs/postgres.md: a schema "demo" with clients, changes
-- and jobs, as scripts/seed-demo puts them in Kinto (fewer rows). Applied by
-- scripts/check-readme before the page's examples run; it starts over each time.
DROP SCHEMA IF EXISTS demo CASCADE;
DO $$ BEGIN   -- and what change tracking kept of the tables dropped, if it is installed
    IF to_regclass('tether.tracked') IS NOT NULL THEN
        DELETE FROM tether.versions WHERE relation LIKE 'demo.%';
        DELETE FROM tether.tombstones WHERE relation LIKE 'demo.%';
        DELETE FROM tether.tracked WHERE relation LIKE 'demo.%';
    END IF;
END $$;
CREATE SCHEMA demo;

CREATE TABLE demo.clients (
    id      text PRIMARY KEY,
    "Owner" text NOT NULL,
    "Host"  text
);

CREATE TABLE demo.changes (
    id            text PRIMARY KEY,
    "Change"      integer NOT NULL,
    "User"        text NOT NULL,
    "Status"      text NOT NULL CHECK ("Status" IN ('pending', 'submitted', 'shelved')),
    "Description" text,
    "Client"      text REFERENCES demo.clients (id) ON DELETE SET NULL
);

CREATE TABLE demo.jobs (
    id            text PRIMARY KEY,
    "Status"      text NOT NULL CHECK ("Status" IN ('open', 'closed', 'suspended')),
    "User"        text,
    "Description" text
);

INSERT INTO demo.clients
SELECT name || '-ws', name, name || '.example.com'
FROM unnest(ARRAY['alice', 'bob', 'carol', 'chris', 'dave', 'erin']) AS name;

INSERT INTO demo.changes
SELECT 'c' || (1000 + i), 1000 + i,
       (ARRAY['alice', 'bob', 'carol', 'chris', 'dave', 'erin'])[1 + i % 6],
       (ARRAY['pending', 'submitted', 'shelved'])[1 + i % 3],
       'Change ' || (1000 + i),
       (ARRAY['alice', 'bob', 'carol', 'chris', 'dave', 'erin'])[1 + i % 6] || '-ws'
FROM generate_series(1, 200) AS i;

INSERT INTO demo.jobs
SELECT 'job' || lpad(i::text, 6, '0'), (ARRAY['open', 'closed'])[1 + i % 2], 'alice', 'Job ' || i
FROM generate_series(1, 20) AS i;
