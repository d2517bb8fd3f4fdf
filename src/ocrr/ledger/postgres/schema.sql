-- The ledger's tables, append-only triggers and NOTIFY in one PostgreSQL schema (the
-- connection's search_path). Loaded by ocrr.ledger.postgres.schema as TABLES_SQL; idempotent.
CREATE TABLE IF NOT EXISTS ocrr_head (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    format text NOT NULL,
    version integer NOT NULL,
    dim integer CHECK (dim > 0),
    size bigint NOT NULL CHECK (size >= 0),
    chain_head bytea NOT NULL CHECK (length(chain_head) = 32),
    root bytea NOT NULL CHECK (length(root) = 32)
);
CREATE TABLE IF NOT EXISTS ocrr_entries (
    seq bigint PRIMARY KEY CHECK (seq >= 0),
    label text NOT NULL,
    text text,
    vector bytea NOT NULL,
    prev_hash bytea NOT NULL,
    hash bytea NOT NULL,
    leaf bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS ocrr_checkpoints (
    size bigint PRIMARY KEY,
    chain_head bytea NOT NULL,
    root bytea NOT NULL,
    time double precision NOT NULL,
    note text
);
CREATE TABLE IF NOT EXISTS ocrr_verifications (
    id bigserial PRIMARY KEY,
    time double precision NOT NULL,
    report text NOT NULL
);

CREATE OR REPLACE FUNCTION ocrr_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ocrr ledger is append-only: % on %.% refused', TG_OP, TG_TABLE_SCHEMA, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END $$;

CREATE OR REPLACE FUNCTION ocrr_head_grows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.size < OLD.size OR NEW.format <> OLD.format OR NEW.version <> OLD.version
       OR (OLD.dim IS NOT NULL AND NEW.dim IS DISTINCT FROM OLD.dim)
       OR (NEW.size = OLD.size AND (NEW.chain_head <> OLD.chain_head OR NEW.root <> OLD.root)) THEN
        RAISE EXCEPTION 'the ocrr ledger head only grows: % on %.ocrr_head refused', TG_OP, TG_TABLE_SCHEMA
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION ocrr_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ocrr_ledger', TG_TABLE_SCHEMA);
    RETURN NULL;
END $$;

CREATE OR REPLACE TRIGGER ocrr_entries_append_only BEFORE UPDATE OR DELETE ON ocrr_entries
    FOR EACH ROW EXECUTE FUNCTION ocrr_refuse_change();
CREATE OR REPLACE TRIGGER ocrr_entries_no_truncate BEFORE TRUNCATE ON ocrr_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ocrr_refuse_change();
CREATE OR REPLACE TRIGGER ocrr_entries_notify AFTER INSERT ON ocrr_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ocrr_notify();
CREATE OR REPLACE TRIGGER ocrr_checkpoints_append_only BEFORE UPDATE OR DELETE ON ocrr_checkpoints
    FOR EACH ROW EXECUTE FUNCTION ocrr_refuse_change();
CREATE OR REPLACE TRIGGER ocrr_checkpoints_no_truncate BEFORE TRUNCATE ON ocrr_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION ocrr_refuse_change();
CREATE OR REPLACE TRIGGER ocrr_verifications_append_only BEFORE UPDATE OR DELETE ON ocrr_verifications
    FOR EACH ROW EXECUTE FUNCTION ocrr_refuse_change();
CREATE OR REPLACE TRIGGER ocrr_verifications_no_truncate BEFORE TRUNCATE ON ocrr_verifications
    FOR EACH STATEMENT EXECUTE FUNCTION ocrr_refuse_change();
CREATE OR REPLACE TRIGGER ocrr_head_only_grows BEFORE UPDATE OR DELETE ON ocrr_head
    FOR EACH ROW EXECUTE FUNCTION ocrr_head_grows();
CREATE OR REPLACE TRIGGER ocrr_head_no_truncate BEFORE TRUNCATE ON ocrr_head
    FOR EACH STATEMENT EXECUTE FUNCTION ocrr_refuse_change();
