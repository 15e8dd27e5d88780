-- The distinct-permissions trigger, without a temporary b-tree per row; what it refuses is
-- unchanged (SPEC section 7: approved permissions are a JSON array of distinct strings).
--
-- Why: `count(DISTINCT value)` makes SQLite open a temporary b-tree (a pager of its own, its
-- pages zeroed) for every generation row inserted. Measured with callgrind on a 2,000-project
-- `sources import`, that was 10% of the writer's instructions. Arrays of zero or one element
-- are distinct; up to 16 elements are compared in pairs (at most 120 comparisons, no
-- temporary table); longer arrays still count distinct values. `value` compares as the old
-- DISTINCT did (text, binary collation), and the first test refuses anything not a string.
-- Only JSON functions the old trigger already needed are used, so any SQLite that could write
-- these tables before still can.

DROP TRIGGER package_generations_permissions_distinct;
CREATE TRIGGER package_generations_permissions_distinct
BEFORE INSERT ON package_generations
WHEN json_valid(NEW.approved_permissions) AND json_type(NEW.approved_permissions) = 'array' AND (
  EXISTS (SELECT 1 FROM json_each(NEW.approved_permissions) WHERE type <> 'text')
  OR CASE
       WHEN json_array_length(NEW.approved_permissions) < 2 THEN 0
       WHEN json_array_length(NEW.approved_permissions) <= 16 THEN EXISTS (
         SELECT 1 FROM json_each(NEW.approved_permissions) AS a, json_each(NEW.approved_permissions) AS b
         WHERE b.key > a.key AND b.value = a.value)
       ELSE (SELECT count(*) <> count(DISTINCT value) FROM json_each(NEW.approved_permissions))
     END)
BEGIN
  SELECT RAISE(ABORT, 'package_generations.approved_permissions must be a JSON array of distinct strings');
END;
