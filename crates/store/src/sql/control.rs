//! Activation and removal (`control.rs`): the control plane's side, for `sources`.

use super::*;

/// Locks an installation's head (so concurrent activations of one installation serialise) and
/// reads its active generation.
pub const LOCK_INSTALLATION: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = active_generation
WHERE installation_id = $1
RETURNING active_generation"
);

/// A generation's status.
pub const GENERATION_STATUS: Statement = statement!(
    "
SELECT g.status
FROM ql3.package_generations AS g
WHERE g.installation_id = $1 AND g.generation = $2"
);

/// Marks a generation superseded.
pub const SUPERSEDE: Statement = statement!(
    "
UPDATE ql3.package_generations SET status = 'superseded'
WHERE installation_id = $1 AND generation = $2"
);

/// Marks a generation active.
pub const MARK_ACTIVE: Statement = statement!(
    "
UPDATE ql3.package_generations SET status = 'active'
WHERE installation_id = $1 AND generation = $2"
);

/// Points an installation's head at a generation.
pub const POINT_HEAD: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = $1
WHERE installation_id = $2"
);

/// Locks a project's package head and reads its installation and active generation.
pub const LOCK_PACKAGE: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = active_generation
WHERE project_id = $1 AND package_name = $2
RETURNING installation_id, active_generation AS previous"
);

/// Removes a package from its project: the head points at nothing.
pub const CLEAR_HEAD: Statement = statement!(
    "
UPDATE ql3.package_installations SET active_generation = NULL
WHERE project_id = $1 AND package_name = $2"
);
