//! The process-wide byte budget (`--max-buffered-bytes`): what requests being read and decoded,
//! and the chunks queued for the database, may hold.
//!
//! - **All or nothing, in order.** A request claims what it expects to need before it reads a byte
//!   of its message, and while the budget has no room for that it waits holding nothing, in a
//!   first-come, first-served line ([`Budget::claim`]).
//! - **Charged as it arrives.** Within its claim a request charges only what it actually holds, as
//!   bytes arrive and records are built ([`Claim::charge`]): the buffered-bytes gauge is memory,
//!   not announcements.
//! - **One overdraft, so that growing cannot deadlock.** A request whose estimate was short grows
//!   its claim at once when there is room. When there is none it waits for the one overdraft slot,
//!   whose holder may go past the budget until its message is decoded (at most one message's cap):
//!   no set of requests holding part of the budget can wait on each other for ever.
//!   `docs/architecture.md` has the argument.
//! - **Shares.** One tenant's requests in progress claim at most its share of the budget, so a
//!   tenant whose clients are slow or stuck never holds the room of the others.
//!
//! Every wait ends when the budget has not moved for `--enqueue-timeout` ([`super::stall`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

use super::stall::{unless_stalled, Progress, Stalled};

/// Charges a claim collects before it shows them in [`Budget::charged`]: the gauge may lag by
/// this much per request, and the hot path touches the shared counter once per step, not per
/// record.
const PUBLISH_STEP: usize = 64 * 1024;

/// How the budget is sized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BudgetLimits {
    /// Bytes requests in progress and queued chunks may hold together.
    pub total: usize,
    /// Bytes one tenant's requests in progress may claim.
    pub tenant_share: usize,
    /// How long a wait may see the budget not move before it is refused.
    pub stall_timeout: Duration,
}

/// The budget, shared by every ingest handler and the shards.
#[derive(Clone, Debug)]
pub(crate) struct Budget {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    limits: BudgetLimits,
    message_cap: usize,
    books: Mutex<Books>,
    /// Bytes actually held, as published by claims and chunks.
    charged: AtomicUsize,
    /// Moves whenever bytes come back.
    freed: Progress,
}

/// What is claimed, by whom, and who waits: only ever touched under the lock, once or twice per
/// message (never per record).
#[derive(Debug, Default)]
struct Books {
    /// Claims of the requests in progress plus the bytes of queued chunks.
    reserved: usize,
    /// Claims of each tenant's requests in progress.
    tenants: HashMap<Arc<str>, usize>,
    /// Requests waiting for their first claim, in arrival order.
    line: VecDeque<Waiter>,
    /// The claim holding the overdraft slot.
    overdraft: Option<u64>,
    /// Claims waiting to grow through the overdraft slot, in arrival order.
    overdraft_line: VecDeque<Waiter>,
    next_id: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    tenant: Arc<str>,
    bytes: usize,
    granted: oneshot::Sender<()>,
}

impl Budget {
    /// A budget of `limits.total` bytes.
    pub(crate) fn new(limits: BudgetLimits) -> Budget {
        // Half the budget, so that a message never waits for room only it could free and no
        // single request can take it all; and within its tenant's share, so that it can be
        // admitted at all.
        let message_cap = (limits.total / 2).min(limits.tenant_share).max(1);
        Budget {
            shared: Arc::new(Shared {
                limits,
                message_cap,
                books: Mutex::default(),
                charged: AtomicUsize::new(0),
                freed: Progress::default(),
            }),
        }
    }

    /// Most bytes one message may claim or hold while it is read and decoded.
    pub(crate) fn message_cap(&self) -> usize {
        self.shared.message_cap
    }

    /// Bytes held now: requests' charges and queued chunks (within [`PUBLISH_STEP`] per request).
    pub(crate) fn charged(&self) -> usize {
        self.shared.charged.load(Ordering::Relaxed)
    }

    /// Bytes claimed now (what admission counts), and requests waiting for a first claim.
    pub(crate) fn reserved_and_waiting(&self) -> (usize, usize) {
        let books = self.books();
        (
            books.reserved,
            books.line.len() + books.overdraft_line.len(),
        )
    }

    /// Claims `bytes` (capped at the message cap) for a request of `tenant`, waiting in line,
    /// holding nothing, until the budget and the tenant's share have room; refused when the budget
    /// does not move for the stall timeout meanwhile.
    pub(crate) async fn claim(&self, tenant: &Arc<str>, bytes: usize) -> Result<Claim, Stalled> {
        let bytes = bytes.min(self.shared.message_cap);
        let limits = &self.shared.limits;
        let (id, granted) = {
            let mut books = self.books();
            let id = books.next_id;
            books.next_id += 1;
            if books.line.is_empty() && books.fits(tenant, bytes, limits) {
                books.take(tenant, bytes);
                return Ok(self.claimed(id, tenant, bytes));
            }
            let (sender, granted) = oneshot::channel();
            books.line.push_back(Waiter {
                id,
                tenant: Arc::clone(tenant),
                bytes,
                granted: sender,
            });
            books.serve(limits);
            (id, granted)
        };
        self.wait(id, tenant, bytes, granted).await?;
        Ok(self.claimed(id, tenant, bytes))
    }

    fn claimed(&self, id: u64, tenant: &Arc<str>, bytes: usize) -> Claim {
        Claim {
            budget: self.clone(),
            id,
            tenant: Arc::clone(tenant),
            claimed: bytes,
            charged: 0,
            published: 0,
        }
    }

    /// Waits for the grant of waiter `id`; if the wait is given up (stalled, or its request
    /// dropped), the waiter leaves its line, or gives back what it was granted meanwhile.
    async fn wait(
        &self,
        id: u64,
        tenant: &Arc<str>,
        bytes: usize,
        granted: oneshot::Receiver<()>,
    ) -> Result<(), Stalled> {
        let mut pending = Pending {
            budget: self,
            id,
            tenant,
            bytes,
            granted: Some(granted),
        };
        let granted = pending.granted.as_mut().expect("taken only on success");
        unless_stalled(
            granted,
            &self.shared.freed,
            self.shared.limits.stall_timeout,
        )
        .await?
        .expect("a waiter's sender is dropped only by a grant");
        pending.granted = None;
        Ok(())
    }

    fn books(&self) -> MutexGuard<'_, Books> {
        // A panic while the books were held leaves them consistent (every change is one step).
        self.shared
            .books
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Gives back `claimed` bytes of `tenant`'s claims and `reserved` bytes of the total, ends
    /// the overdraft of claim `id` if it held it, and serves whoever now fits.
    fn give_back(
        &self,
        id: Option<u64>,
        tenant: Option<&Arc<str>>,
        claimed: usize,
        reserved: usize,
    ) {
        let mut books = self.books();
        books.reserved -= reserved;
        if let Some(tenant) = tenant {
            books.untake_tenant(tenant, claimed);
        }
        if id.is_some() && books.overdraft == id {
            books.overdraft = None;
        }
        if reserved > 0 {
            self.shared.freed.mark();
        }
        books.serve(&self.shared.limits);
    }

    #[cfg(test)]
    fn check_invariants(&self) {
        let books = self.books();
        let limits = &self.shared.limits;
        let in_progress: usize = books.tenants.values().sum();
        assert!(in_progress <= books.reserved, "{books:?}");
        assert!(
            books.reserved <= limits.total + self.shared.message_cap,
            "{books:?}"
        );
    }
}

impl Books {
    fn fits(&self, tenant: &Arc<str>, bytes: usize, limits: &BudgetLimits) -> bool {
        self.reserved + bytes <= limits.total
            && self.tenants.get(tenant).copied().unwrap_or(0) + bytes <= limits.tenant_share
    }

    fn take(&mut self, tenant: &Arc<str>, bytes: usize) {
        self.reserved += bytes;
        *self.tenants.entry(Arc::clone(tenant)).or_default() += bytes;
    }

    fn untake_tenant(&mut self, tenant: &Arc<str>, bytes: usize) {
        if let Some(held) = self.tenants.get_mut(tenant) {
            *held -= bytes;
            if *held == 0 {
                self.tenants.remove(tenant);
            }
        }
    }

    /// Grants whoever waits and now fits: first the overdraft slot, whose waiters already hold
    /// claims, then the line in order. A waiter the budget has no room for stops the line (nobody
    /// overtakes it); one held back only by its tenant's share is passed over, with the rest of
    /// its tenant's waiters, so that one tenant's full share never blocks another's requests.
    fn serve(&mut self, limits: &BudgetLimits) {
        if self.overdraft.is_none() && self.reserved <= limits.total {
            if let Some(waiter) = self.overdraft_line.pop_front() {
                self.take(&waiter.tenant, waiter.bytes);
                self.overdraft = Some(waiter.id);
                // The waiter is in the line until it is granted, so its receiver is alive.
                let _ = waiter.granted.send(());
            }
        }
        let mut passed_over: Vec<Arc<str>> = Vec::new();
        let mut at = 0;
        while let Some(waiter) = self.line.get(at) {
            if passed_over.contains(&waiter.tenant) {
                at += 1;
                continue;
            }
            if self.reserved + waiter.bytes > limits.total {
                break;
            }
            if !self.fits(&waiter.tenant, waiter.bytes, limits) {
                passed_over.push(Arc::clone(&waiter.tenant));
                at += 1;
                continue;
            }
            let waiter = self.line.remove(at).expect("the waiter is at `at`");
            self.take(&waiter.tenant, waiter.bytes);
            let _ = waiter.granted.send(());
        }
    }

    /// Takes waiter `id` out of whichever line holds it; false when it is in none (granted).
    fn leave(&mut self, id: u64) -> bool {
        for line in [&mut self.line, &mut self.overdraft_line] {
            if let Some(at) = line.iter().position(|waiter| waiter.id == id) {
                line.remove(at);
                return true;
            }
        }
        false
    }
}

/// A waiter that gives up: leaves its line, or gives back a grant that came too late.
struct Pending<'a> {
    budget: &'a Budget,
    id: u64,
    tenant: &'a Arc<str>,
    bytes: usize,
    granted: Option<oneshot::Receiver<()>>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let Some(mut granted) = self.granted.take() else {
            return;
        };
        let mut books = self.budget.books();
        if books.leave(self.id) {
            // Its place may have held back those behind it.
            books.serve(&self.budget.shared.limits);
            return;
        }
        drop(books);
        if granted.try_recv().is_ok() {
            self.budget
                .give_back(Some(self.id), Some(self.tenant), self.bytes, self.bytes);
        }
    }
}

/// What one request holds while its message is read and decoded: a claim on the budget and,
/// within it, what it has charged. Dropped, it gives everything back.
#[derive(Debug)]
pub(crate) struct Claim {
    budget: Budget,
    id: u64,
    tenant: Arc<str>,
    claimed: usize,
    charged: usize,
    /// What of `charged` is shown in [`Budget::charged`].
    published: usize,
}

impl Claim {
    /// Bytes claimed.
    pub(crate) fn claimed(&self) -> usize {
        self.claimed
    }

    /// Bytes charged within the claim.
    pub(crate) fn charged(&self) -> usize {
        self.charged
    }

    /// Charges `bytes` more, which the caller has made sure the claim covers ([`Claim::grow_to`]).
    pub(crate) fn charge(&mut self, bytes: usize) {
        self.charged += bytes;
        debug_assert!(self.charged <= self.claimed, "{self:?}");
        if self.charged >= self.published + PUBLISH_STEP {
            self.publish();
        }
    }

    /// Gives back the charge of `bytes` no longer held; the claim stays, for what comes.
    pub(crate) fn release(&mut self, bytes: usize) {
        self.charged = self.charged.saturating_sub(bytes);
        if self.charged + PUBLISH_STEP <= self.published {
            self.publish();
        }
    }

    fn publish(&mut self) {
        let charged = &self.budget.shared.charged;
        if self.charged > self.published {
            charged.fetch_add(self.charged - self.published, Ordering::Relaxed);
        } else {
            charged.fetch_sub(self.published - self.charged, Ordering::Relaxed);
        }
        self.published = self.charged;
    }

    /// Grows the claim to at least `bytes` (at most the message cap): at once when the budget and
    /// the tenant's share have room or this claim holds the overdraft slot; through the slot when
    /// it is free; otherwise after waiting for it.
    pub(crate) async fn grow_to(&mut self, bytes: usize) -> Result<(), Stalled> {
        let budget = self.budget.clone();
        let bytes = bytes.min(budget.shared.message_cap);
        if bytes <= self.claimed {
            return Ok(());
        }
        let more = bytes - self.claimed;
        let limits = &budget.shared.limits;
        let granted = {
            let mut books = budget.books();
            let holds_overdraft = books.overdraft == Some(self.id);
            if holds_overdraft || books.fits(&self.tenant, more, limits) {
                books.take(&self.tenant, more);
                self.claimed = bytes;
                return Ok(());
            }
            if books.overdraft.is_none()
                && books.overdraft_line.is_empty()
                && books.reserved <= limits.total
            {
                books.take(&self.tenant, more);
                books.overdraft = Some(self.id);
                self.claimed = bytes;
                return Ok(());
            }
            let (sender, granted) = oneshot::channel();
            books.overdraft_line.push_back(Waiter {
                id: self.id,
                tenant: Arc::clone(&self.tenant),
                bytes: more,
                granted: sender,
            });
            granted
        };
        budget.wait(self.id, &self.tenant, more, granted).await?;
        self.claimed = bytes;
        Ok(())
    }

    /// Turns the claim into what a queued chunk of `bytes` holds until its batch is written; the
    /// rest of the claim goes back, and so does the overdraft slot.
    pub(crate) fn into_held(mut self, bytes: usize) -> Held {
        debug_assert!(bytes <= self.claimed, "{self:?}");
        let bytes = bytes.min(self.claimed);
        self.charged = bytes;
        self.publish();
        let budget = self.budget.clone();
        budget.give_back(
            Some(self.id),
            Some(&self.tenant),
            self.claimed,
            self.claimed - bytes,
        );
        // Everything is given back or handed over: nothing is left for the drop to return.
        self.claimed = 0;
        self.published = 0;
        self.id = u64::MAX;
        Held { budget, bytes }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if self.claimed == 0 && self.published == 0 {
            return;
        }
        self.charged = 0;
        self.publish();
        self.budget.give_back(
            Some(self.id),
            Some(&self.tenant),
            self.claimed,
            self.claimed,
        );
    }
}

/// The bytes a queued chunk holds until its batch is written; given back when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    budget: Budget,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget
            .shared
            .charged
            .fetch_sub(self.bytes, Ordering::Relaxed);
        self.budget.give_back(None, None, 0, self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    const TIMEOUT: Duration = Duration::from_secs(5);

    fn budget(total: usize, tenant_share: usize) -> Budget {
        Budget::new(BudgetLimits {
            total,
            tenant_share,
            stall_timeout: TIMEOUT,
        })
    }

    fn tenant(name: &str) -> Arc<str> {
        Arc::from(name)
    }

    #[tokio::test(start_paused = true)]
    async fn requests_that_grow_past_their_claims_never_wait_on_each_other() {
        // Three requests each claim 30 of 100, then each needs 15 more: the hold-and-wait that used
        // to stop everything until the timeout. The overdraft slot lets one finish at a time.
        let budget = budget(100, 100);
        let a = tenant("a");
        let mut claims = Vec::new();
        for _ in 0..3 {
            claims.push(budget.claim(&a, 30).await.unwrap());
        }
        let started = Instant::now();
        let mut tasks = Vec::new();
        for (n, mut claim) in claims.into_iter().enumerate() {
            let budget = budget.clone();
            tasks.push(tokio::spawn(async move {
                claim.grow_to(45).await.unwrap();
                claim.charge(45);
                budget.check_invariants();
                let held = claim.into_held(45);
                // The batch is written a while later.
                tokio::time::sleep(Duration::from_millis(100 * (n as u64 + 1))).await;
                drop(held);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());
        assert_eq!(budget.reserved_and_waiting(), (0, 0));
        assert_eq!(budget.charged(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_served_in_order_and_a_large_one_is_not_overtaken() {
        let budget = budget(100, 100);
        let a = tenant("a");
        let first = budget.claim(&a, 50).await.unwrap();
        let second = budget.claim(&a, 30).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for (n, bytes) in [(1, 40), (2, 10), (3, 10)] {
            let (budget, a, order) = (budget.clone(), Arc::clone(&a), Arc::clone(&order));
            waiters.push(tokio::spawn(async move {
                let claim = budget.claim(&a, bytes).await.unwrap();
                order.lock().unwrap().push(n);
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(claim);
            }));
            tokio::task::yield_now().await;
        }
        // 20 are free: enough for the two small ones, but the large one came first.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(order.lock().unwrap().is_empty());
        drop(first);
        for waiter in waiters {
            waiter.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![1, 2, 3]);
        drop(second);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tenant_at_its_share_does_not_hold_back_another() {
        let budget = budget(100, 50);
        let (slow, other) = (tenant("slow"), tenant("other"));
        let held = budget.claim(&slow, 50).await.unwrap();
        // The slow tenant's next request waits for its own share, in front of the other tenant's.
        let blocked = {
            let (budget, slow) = (budget.clone(), Arc::clone(&slow));
            tokio::spawn(async move { budget.claim(&slow, 10).await.map(drop) })
        };
        tokio::task::yield_now().await;
        let started = Instant::now();
        let passed = budget.claim(&other, 40).await.unwrap();
        assert_eq!(started.elapsed(), Duration::ZERO);
        drop(passed);
        drop(held);
        blocked.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_refused_only_when_nothing_moves_for_the_timeout() {
        let budget = budget(100, 100);
        let a = tenant("a");
        let first = budget.claim(&a, 50).await.unwrap();
        let (second, third) = (
            budget.claim(&a, 25).await.unwrap(),
            budget.claim(&a, 25).await.unwrap(),
        );
        // 25 bytes come back after 4 s: not enough for the waiter, but the budget moved.
        let freeing = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(4)).await;
            drop(third);
        });
        let started = Instant::now();
        let refused = budget.claim(&a, 40).await.unwrap_err();
        assert_eq!(started.elapsed(), Duration::from_secs(4) + TIMEOUT);
        assert_eq!(refused.waited, started.elapsed());
        freeing.await.unwrap();
        // The refused waiter left the line.
        assert_eq!(budget.reserved_and_waiting(), (75, 0));
        drop((first, second));
        budget.check_invariants();
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_that_gives_up_leaves_nothing_behind() {
        let budget = budget(100, 100);
        let a = tenant("a");
        let first = (
            budget.claim(&a, 50).await.unwrap(),
            budget.claim(&a, 30).await.unwrap(),
        );
        let gone = {
            let (budget, a) = (budget.clone(), Arc::clone(&a));
            tokio::spawn(async move { budget.claim(&a, 30).await.map(drop) })
        };
        tokio::task::yield_now().await;
        assert_eq!(budget.reserved_and_waiting(), (80, 1));
        gone.abort();
        let _ = gone.await;
        assert_eq!(budget.reserved_and_waiting(), (80, 0));
        drop(first);
        assert_eq!(budget.reserved_and_waiting(), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn many_requests_growing_at_random_all_finish_within_the_bound() {
        // A soak of the whole protocol: 200 requests of random sizes claim, grow past their
        // estimates, become chunks and are written at random times; none may be refused (the
        // budget always moves) and the books must hold their bounds at every step.
        let budget = budget(1000, 600);
        let tenants = [tenant("a"), tenant("b"), tenant("c")];
        let mut rng = fastrand::Rng::with_seed(29);
        let mut tasks = Vec::new();
        for n in 0..200 {
            let budget = budget.clone();
            let tenant = Arc::clone(&tenants[n % tenants.len()]);
            // Estimates far short of what the requests turn out to need, all at about once.
            let estimate = rng.usize(1..=100);
            let actual = rng.usize(100..=budget.message_cap());
            let (pause, write) = (rng.u64(0..20), rng.u64(1..200));
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(pause)).await;
                let mut claim = budget.claim(&tenant, estimate).await.unwrap();
                budget.check_invariants();
                let mut charged = 0;
                while charged < actual {
                    let step = (actual - charged).min(37);
                    claim.grow_to(charged + step).await.unwrap();
                    claim.charge(step);
                    charged += step;
                    budget.check_invariants();
                    tokio::task::yield_now().await;
                }
                let held = claim.into_held(actual);
                budget.check_invariants();
                tokio::time::sleep(Duration::from_millis(write)).await;
                drop(held);
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(budget.reserved_and_waiting(), (0, 0));
        assert_eq!(budget.charged(), 0);
    }
}
