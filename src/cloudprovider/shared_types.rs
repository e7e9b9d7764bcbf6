//! The instance-type cache as the controllers share it. A provisioning pass translates the
//! catalogue (CPU work of up to seconds at ~1,400 types) while node lifecycle looks up what a
//! node that has not initialised is expected to offer, and the status loop prices nodes. A lock
//! held for the translation would park those loops' runtime threads for its whole length, so
//! readers take the last finished cache (an `Arc`, copied under the lock) and a pass builds the
//! next one on its own copy, holding the lock only to copy and to swap.

use std::sync::{Arc, Mutex};

use super::catalogue::TypeCache;

/// The last finished `TypeCache`, swapped in whole.
#[derive(Default)]
pub struct SharedTypes {
    current: Mutex<Arc<TypeCache>>,
    /// Held by an update for its whole build: a provisioning pass and a deprovisioning snapshot
    /// (which does not take the pass lock) may update at the same time, and the second then
    /// builds on the first's result instead of translating the same catalogue again.
    building: Mutex<()>,
}

impl SharedTypes {
    /// The cache as the last finished update left it.
    pub fn current(&self) -> Arc<TypeCache> {
        self.current.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs `build` on a copy of the current cache, then makes the copy current. Readers never
    /// wait for it (`current` is locked only to copy and to swap); another update does.
    pub fn update<R>(&self, build: impl FnOnce(&mut TypeCache) -> R) -> R {
        let _one_at_a_time = self.building.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = TypeCache::clone(&self.current());
        let result = build(&mut next);
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        result
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::apis::v1alpha1::AwsProvider;
    use crate::cloudprovider::{InstanceTypeInfo, KubernetesVersion, NodeTemplate};
    use crate::scheduling::testing::provisioner;
    use crate::scheduling::NodeSettings;

    fn info(name: &str) -> InstanceTypeInfo {
        crate::cloudprovider::catalogue::test_info(name, 0.1)
    }

    /// Builds `service`'s types from `catalogue` into `cache`.
    fn build(cache: &mut TypeCache, catalogue: Vec<InstanceTypeInfo>) {
        let template = NodeTemplate::from_provider(&AwsProvider::default(), "c", KubernetesVersion { major: 1, minor: 33 }).unwrap();
        let zones = BTreeSet::from(["ap-northeast-2a".to_string()]);
        cache.set_catalogue(catalogue);
        cache.instance_types(
            &provisioner("service").build(),
            &template,
            &zones,
            "ap-northeast-2",
            &NodeSettings::default(),
        );
    }

    #[test]
    fn a_reader_gets_the_last_cache_at_once_while_a_pass_builds_the_next() {
        // Node lifecycle once waited for a pass's whole translation on the lock it held.
        let shared = Arc::new(SharedTypes::default());
        shared.update(|cache| build(cache, vec![info("t3.large")]));
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let builder = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                shared.update(|cache| {
                    started_tx.send(()).unwrap();
                    // A translation held for as long as the test needs.
                    release_rx.recv().unwrap();
                    build(cache, vec![info("t3.large"), info("m5.large")]);
                })
            })
        };
        started.recv().unwrap();
        let (answer_tx, answer) = mpsc::channel();
        {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let current = shared.current();
                answer_tx
                    .send((current.instance_type("service", "t3.large").is_some(), current.catalogue().len()))
                    .unwrap();
            });
        }
        // Not a timing assertion: the reader answers long before this unless it waits for the
        // builder, which waits for this test, forever.
        let read = answer.recv_timeout(Duration::from_secs(60));
        release.send(()).unwrap();
        builder.join().unwrap();
        assert_eq!(
            read,
            Ok((true, 1)),
            "the reader got the last finished cache while the next was built"
        );
        assert_eq!(shared.current().catalogue().len(), 2, "the finished build is current");
    }

    #[test]
    fn an_update_started_during_another_builds_on_its_result() {
        let shared = Arc::new(SharedTypes::default());
        let (started_tx, started) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let first = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                shared.update(|cache| {
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    build(cache, vec![info("t3.large")]);
                })
            })
        };
        started.recv().unwrap();
        let second = {
            let shared = shared.clone();
            // What the second update found when its build began.
            std::thread::spawn(move || shared.update(|cache| cache.catalogue().len()))
        };
        release.send(()).unwrap();
        first.join().unwrap();
        assert_eq!(second.join().unwrap(), 1, "the second update began from the first's cache");
    }

    #[test]
    fn an_update_that_panics_leaves_the_last_cache_current() {
        let shared = SharedTypes::default();
        shared.update(|cache| build(cache, vec![info("t3.large")]));
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            shared.update(|cache| {
                cache.set_catalogue(Vec::new());
                panic!("a translation that fails half-way");
            })
        }));
        assert!(failed.is_err());
        assert_eq!(shared.current().catalogue().len(), 1);
        assert!(shared.current().instance_type("service", "t3.large").is_some());
    }
}
