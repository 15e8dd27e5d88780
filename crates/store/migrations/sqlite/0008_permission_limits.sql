-- The approved permissions' limits (contract sections 2 and 5), as PostgreSQL's migration 17:
-- at most 256 a generation, each matching ^[a-z][a-z0-9._:-]{0,63}$ (a lowercase letter
-- first, then lowercase letters, digits and . _ : -, at most 64 characters), in at most 18 KiB
-- of JSON text. A trigger on
-- INSERT: rows stored before it keep their values (their projects are `source-invalid`), and
-- `approved_permissions` cannot be updated (migration 1). Non-strings are the format trigger's.
CREATE TRIGGER package_generations_permission_limits
BEFORE INSERT ON package_generations
WHEN NEW.approved_permissions <> '[]'
  AND json_valid(NEW.approved_permissions) AND json_type(NEW.approved_permissions) = 'array' AND (
  octet_length(NEW.approved_permissions) > 18432
  OR json_array_length(NEW.approved_permissions) > 256
  OR EXISTS (SELECT 1 FROM json_each(NEW.approved_permissions) AS e
             WHERE e.type = 'text'
               AND NOT (length(e.value) BETWEEN 1 AND 64
                        AND e.value GLOB '[a-z]*'
                        AND NOT e.value GLOB '*[^-a-z0-9._:]*')))
BEGIN
  SELECT RAISE(ABORT, 'package_generations.approved_permissions breaks its limits: a generation approves at most 256 distinct permissions, each matching ^[a-z][a-z0-9._:-]{0,63}$, in at most 18 KiB of JSON text');
END;
