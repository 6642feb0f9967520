//! One message's account with the budget while it is read and decoded: the handler states what it
//! expects the message to need ([`Meter::reserve`], its place in line), then charges what it
//! actually holds as bytes arrive and records are built ([`Meter::charge`]); a message that would
//! hold more than one message may is refused before the bytes that would pass the cap exist.

use std::sync::Arc;

use tokio::time::Instant;

use super::budget::Claim;
use super::stall::Stalled;
use super::Ingress;
use crate::error::IngestError;

/// Least a claim grows by when a charge outgrows it: a message whose estimate was short grows in a
/// few steps, not one per record.
const GROW_STEP: usize = 256 * 1024;

/// Budget taken for one message while it is read and decoded; given back when dropped, or handed
/// to the message's chunk by [`Ingress::enqueue`].
pub struct Meter<'a> {
    ingress: &'a Ingress,
    tenant: Arc<str>,
    claim: Option<Claim>,
    started: Instant,
}

impl<'a> Meter<'a> {
    /// A meter for a message of `tenant`'s that has claimed nothing yet.
    pub(super) fn new(ingress: &'a Ingress, tenant: &Arc<str>) -> Self {
        Meter {
            ingress,
            tenant: Arc::clone(tenant),
            claim: None,
            started: Instant::now(),
        }
    }

    /// Makes sure `bytes` (at most the message cap) are claimed. The first call takes the
    /// message's place in line and waits, holding nothing, until the budget has room for all of
    /// it; a later one grows the claim.
    pub async fn reserve(&mut self, bytes: usize) -> Result<(), IngestError> {
        let outcome = match &mut self.claim {
            Some(claim) => claim.grow_to(bytes).await,
            None => self
                .ingress
                .budget
                .claim(&self.tenant, bytes)
                .await
                .map(|claim| {
                    self.claim = Some(claim);
                }),
        };
        outcome.map_err(|stalled| self.stalled(stalled))
    }

    /// Charges `bytes` more, growing the claim first when it does not cover them; refuses the
    /// message once it would hold more than the message cap.
    pub async fn charge(&mut self, bytes: usize) -> Result<(), IngestError> {
        let limit = self.ingress.budget.message_cap();
        let charged = self.charged() + bytes;
        if charged > limit {
            return Err(IngestError::DecodedTooLarge { limit });
        }
        let claimed = self.claim.as_ref().map_or(0, Claim::claimed);
        if charged > claimed {
            let step = (claimed / 4).max(GROW_STEP);
            self.reserve(charged.max(claimed + step)).await?;
        }
        self.claim.as_mut().expect("claimed above").charge(bytes);
        Ok(())
    }

    /// Gives back the charge of `bytes` no longer held (the claim stays, for what comes).
    pub fn release(&mut self, bytes: usize) {
        if let Some(claim) = &mut self.claim {
            claim.release(bytes);
        }
    }

    /// Bytes charged so far.
    pub fn charged(&self) -> usize {
        self.claim.as_ref().map_or(0, Claim::charged)
    }

    /// The claim, grown to cover `bytes` if it does not: what a chunk of that size will hold.
    pub(super) async fn covering(mut self, bytes: usize) -> Result<Claim, IngestError> {
        self.reserve(bytes).await?;
        Ok(self.claim.take().expect("claimed by reserve"))
    }

    fn stalled(&self, stalled: Stalled) -> IngestError {
        // The wait is counted from the message's first claim, as the client saw it.
        let waited = Stalled {
            waited: stalled.waited.max(self.started.elapsed()),
        };
        self.ingress.backpressure("memory budget", waited)
    }
}
