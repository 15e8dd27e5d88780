//! The control plane's own writes, so the product can be used without another system:
//! activating a generation and removing a package (contract section 7), each in one transaction.

use package_executor_core::quote::shown;
use sqlx::Row;

use crate::error::input;
use crate::sql;
use crate::{Attempt, Store, StoreError, answered, on_conn};
use package_executor_core::model::GenerationStatus;

/// Activates a generation (from `staged`, `activating` or `superseded`): the previous active
/// generation becomes `superseded`, this one `active`, and the head points at it, atomically.
pub async fn activate(
    store: &Store,
    installation_id: &str,
    generation: i64,
) -> Result<(), StoreError> {
    let limit = store.answer_timeout();
    store
        .transaction(async |a| {
            answered(limit, activate_in(a, installation_id, generation)).await?;
            Ok(((), true))
        })
        .await
}

async fn activate_in(
    a: &mut Attempt<'_>,
    installation_id: &str,
    generation: i64,
) -> Result<(), StoreError> {
    on_conn!(a, |c, d| {
        // Lock the head first, so concurrent activations of one installation serialise.
        let head = sqlx::query(sql::LOCK_INSTALLATION.text(d))
            .bind(installation_id)
            .fetch_optional(&mut *c)
            .await?;
        let Some(head) = head else {
            return Err(input(format!(
                "installation {} does not exist; check the id",
                shown(installation_id)
            )));
        };
        let current: Option<i64> = head.try_get("active_generation")?;
        let target = sqlx::query(sql::GENERATION_STATUS.text(d))
            .bind(installation_id)
            .bind(generation)
            .fetch_optional(&mut *c)
            .await?;
        let Some(target) = target else {
            return Err(input(format!(
                "installation {} has no generation {generation}; import it first",
                shown(installation_id)
            )));
        };
        let status = crate::rows::generation_status(target.try_get("status")?)?;
        if status == GenerationStatus::Active && current == Some(generation) {
            return Ok(());
        }
        if !status.can_be_activated() {
            return Err(input(format!(
                "generation {generation} of {} is {status}; only staged, activating or \
                 superseded generations can be activated",
                shown(installation_id)
            )));
        }
        if let Some(prev) = current {
            sqlx::query(sql::SUPERSEDE.text(d))
                .bind(installation_id)
                .bind(prev)
                .execute(&mut *c)
                .await?;
        }
        sqlx::query(sql::MARK_ACTIVE.text(d))
            .bind(installation_id)
            .bind(generation)
            .execute(&mut *c)
            .await?;
        sqlx::query(sql::POINT_HEAD.text(d))
            .bind(generation)
            .bind(installation_id)
            .execute(&mut *c)
            .await?;
        Ok(())
    })
}

/// Removes a package from a project: the head becomes NULL and its generation `superseded`.
pub async fn remove(store: &Store, project_id: &str, package_name: &str) -> Result<(), StoreError> {
    let limit = store.answer_timeout();
    store
        .transaction(async |a| {
            answered(limit, remove_in(a, project_id, package_name)).await?;
            Ok(((), true))
        })
        .await
}

async fn remove_in(
    a: &mut Attempt<'_>,
    project_id: &str,
    package_name: &str,
) -> Result<(), StoreError> {
    on_conn!(a, |c, d| {
        let head = sqlx::query(sql::LOCK_PACKAGE.text(d))
            .bind(project_id)
            .bind(package_name)
            .fetch_optional(&mut *c)
            .await?;
        let Some(head) = head else {
            return Err(input(format!(
                "project {} has no package {}; check the names",
                shown(project_id),
                shown(package_name)
            )));
        };
        sqlx::query(sql::CLEAR_HEAD.text(d))
            .bind(project_id)
            .bind(package_name)
            .execute(&mut *c)
            .await?;
        let installation: String = head.try_get("installation_id")?;
        let previous: Option<i64> = head.try_get("previous")?;
        if let Some(prev) = previous {
            sqlx::query(sql::SUPERSEDE.text(d))
                .bind(&installation)
                .bind(prev)
                .execute(&mut *c)
                .await?;
        }
        Ok(())
    })
}
