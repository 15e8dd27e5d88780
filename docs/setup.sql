-- Production setup of a PostgreSQL database for package-executor (docs/operations.md,
-- "Database logins"). Run once as a superuser, or as a CREATEROLE login that owns database
-- `app` (a managed service's admin login), on PostgreSQL 15 through 18. Replace the passwords
-- and the database name. tests/it/store/roles.rs runs this file as such an admin on every
-- major the suite runs on, then migrates, imports, runs and reads through these logins.

-- 1. the group roles (or: package-executor migrate --create-roles, run as a superuser)
CREATE ROLE ql3_owner NOLOGIN;
CREATE ROLE ql3_control_plane NOLOGIN;
CREATE ROLE ql3_package_executor NOLOGIN;
CREATE ROLE ql3_tool_consumer NOLOGIN;
CREATE ROLE ql3_worker NOLOGIN;
CREATE ROLE ql3_api NOLOGIN;
-- 2. one login per job, each a member of exactly one role
CREATE ROLE pe_migrator LOGIN PASSWORD 'change-me' IN ROLE ql3_owner;
CREATE ROLE pe_executor LOGIN PASSWORD 'change-me' IN ROLE ql3_package_executor;
CREATE ROLE control_plane LOGIN PASSWORD 'change-me' IN ROLE ql3_control_plane;
CREATE ROLE tool_consumer LOGIN PASSWORD 'change-me' IN ROLE ql3_tool_consumer;
GRANT CREATE ON DATABASE app TO ql3_owner;   -- so migrations can create schema ql3
-- 3. settings on a NOLOGIN role are not inherited: set them on the logins
ALTER ROLE control_plane SET statement_timeout = '30s';
ALTER ROLE control_plane SET lock_timeout = '5s';
ALTER ROLE control_plane SET idle_in_transaction_session_timeout = '60s';
ALTER ROLE tool_consumer SET statement_timeout = '5s';
-- 4. optional: temporary objects are the DBA's policy
REVOKE TEMPORARY ON DATABASE app FROM PUBLIC;
