//! Property tests of the pure decisions against a from-scratch oracle:
//! random listings (committed, uncommitted, garbage and broken epochs, random
//! pointers, incremental reuse) → `decide_resume` picks what the oracle picks,
//! and `plan_gc` never deletes anything the resume needs.

use std::collections::BTreeMap;

use proptest::prelude::*;
use thund_checkpoint::paths::epoch_dir_name;
use thund_checkpoint::{
    decide_resume, plan_gc, EpochListing, FileEntry, Listing, Manifest, ManifestState,
    PointerState, ResumeDecision,
};

#[derive(Debug, Clone)]
enum Kind {
    Uncommitted,
    Garbage,
    /// Valid manifest; reuses the file of `reuse` epochs back (0 = none);
    /// `file` says what happened to its own file.
    Committed {
        reuse: u64,
        file: FileFate,
        rejected: bool,
    },
}

#[derive(Debug, Clone, Copy)]
enum FileFate {
    Fine,
    Missing,
    Resized,
}

fn kind() -> impl Strategy<Value = Option<Kind>> {
    let fate = prop_oneof![
        6 => Just(FileFate::Fine),
        1 => Just(FileFate::Missing),
        1 => Just(FileFate::Resized),
    ];
    prop_oneof![
        2 => Just(None),
        1 => Just(Some(Kind::Uncommitted)),
        1 => Just(Some(Kind::Garbage)),
        5 => (0u64..3, fate, proptest::bool::weighted(0.15)).prop_map(|(reuse, file, rejected)| {
            Some(Kind::Committed { reuse, file, rejected })
        }),
    ]
}

fn pointer() -> impl Strategy<Value = PointerState> {
    prop_oneof![
        2 => Just(PointerState::Missing),
        1 => Just(PointerState::Unreadable("bad".into())),
        5 => (1u64..=9).prop_map(PointerState::Points),
    ]
}

fn own_file(epoch: u64) -> FileEntry {
    FileEntry::new(epoch, "op", 0, 10, 1000 + epoch)
}

fn manifest_path(epoch: u64) -> String {
    format!("{}/_thund_checkpoint.json", epoch_dir_name(epoch))
}

fn build(kinds: &[Option<Kind>], latest: PointerState) -> Listing {
    let mut l = Listing::new("v");
    l.latest = latest;
    for (i, k) in kinds.iter().enumerate() {
        let epoch = i as u64 + 1;
        let Some(k) = k else { continue };
        let f = own_file(epoch);
        let manifest = match k {
            Kind::Uncommitted => {
                l.objects.insert(f.path.clone(), 3);
                ManifestState::Missing
            }
            Kind::Garbage => {
                l.objects.insert(manifest_path(epoch), 5);
                l.objects.insert(f.path.clone(), f.bytes);
                ManifestState::Unreadable("garbage".into())
            }
            Kind::Committed { reuse, file, .. } => {
                l.objects.insert(manifest_path(epoch), 500);
                match file {
                    FileFate::Fine => {
                        l.objects.insert(f.path.clone(), f.bytes);
                    }
                    FileFate::Resized => {
                        l.objects.insert(f.path.clone(), f.bytes + 1);
                    }
                    FileFate::Missing => {}
                }
                let mut files = vec![f.clone()];
                if *reuse > 0 && epoch > *reuse {
                    files.push(own_file(epoch - reuse));
                }
                ManifestState::Valid(Box::new(Manifest::committed("v", "fp", epoch, files)))
            }
        };
        let rejected = matches!(k, Kind::Committed { rejected: true, .. }).then(|| "bad".into());
        l.epochs.insert(epoch, EpochListing { manifest, rejected });
    }
    l
}

/// The oracle: an epoch is usable iff its manifest is valid, it was not
/// rejected by reading, and every file it lists is present with its size.
fn usable(l: &Listing, epoch: u64) -> bool {
    match l.epochs.get(&epoch) {
        Some(EpochListing {
            manifest: ManifestState::Valid(m),
            rejected: None,
        }) => m
            .files
            .iter()
            .all(|f| l.objects.get(&f.path) == Some(&f.bytes)),
        _ => false,
    }
}

fn has_manifest(l: &Listing) -> bool {
    l.epochs
        .values()
        .any(|e| !matches!(e.manifest, ManifestState::Missing))
}

/// Removes what a gc plan deletes from a listing.
fn apply(l: &Listing, delete: &[String]) -> Listing {
    let mut out = l.clone();
    for path in delete {
        out.objects.remove(path);
        let (dir, file) = path.split_once('/').expect("relative path");
        let epoch: u64 = dir["epoch=".len()..].parse().expect("epoch dir");
        if file == "_thund_checkpoint.json" {
            if let Some(e) = out.epochs.get_mut(&epoch) {
                e.manifest = ManifestState::Missing;
            }
        }
    }
    let prefixes: BTreeMap<u64, usize> = out.objects.keys().fold(BTreeMap::new(), |mut m, p| {
        let epoch: u64 = p["epoch=".len()..p.find('/').expect("slash")]
            .parse()
            .expect("epoch");
        *m.entry(epoch).or_default() += 1;
        m
    });
    out.epochs.retain(|e, _| prefixes.contains_key(e));
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decide_resume_matches_oracle(kinds in proptest::collection::vec(kind(), 0..8), latest in pointer()) {
        let l = build(&kinds, latest.clone());
        let best = l.epochs.keys().rev().copied().find(|e| usable(&l, *e));
        match decide_resume(&l) {
            ResumeDecision::Resume(plan) => {
                prop_assert_eq!(Some(plan.epoch), best);
                for s in &plan.fell_back_from {
                    prop_assert!(s.epoch > plan.epoch);
                }
                for e in &plan.ignored_uncommitted {
                    prop_assert!(*e > plan.epoch);
                    prop_assert!(matches!(l.epochs[e].manifest, ManifestState::Missing));
                    prop_assert_ne!(PointerState::Points(*e), latest.clone());
                }
                // Every newer epoch is accounted for: skipped loudly or
                // ignored as uncommitted.
                let newer = l.epochs.keys().filter(|e| **e > plan.epoch).count();
                let pointer_absent = matches!(latest, PointerState::Points(p) if p > plan.epoch && !l.epochs.contains_key(&p));
                prop_assert_eq!(
                    plan.fell_back_from.len() + plan.ignored_uncommitted.len(),
                    newer + usize::from(pointer_absent)
                );
            }
            ResumeDecision::ColdStart { ignored_uncommitted } => {
                prop_assert_eq!(best, None);
                prop_assert!(!has_manifest(&l));
                prop_assert_eq!(&latest, &PointerState::Missing);
                prop_assert_eq!(ignored_uncommitted.len(), l.epochs.len());
            }
            ResumeDecision::Refuse { skipped, .. } => {
                prop_assert_eq!(best, None);
                prop_assert!(has_manifest(&l) || latest != PointerState::Missing);
                prop_assert!(!skipped.is_empty() || latest != PointerState::Missing);
            }
        }
    }

    #[test]
    fn gc_never_changes_the_resume_point(
        kinds in proptest::collection::vec(kind(), 0..8),
        latest in pointer(),
        retain in 1usize..4,
    ) {
        let l = build(&kinds, latest);
        let plan = plan_gc(&l, retain);
        let newest_committed = l.newest_committed();
        for path in &plan.delete {
            prop_assert!(l.objects.contains_key(path));
            let epoch: u64 = path["epoch=".len()..path.find('/').expect("slash")].parse().expect("epoch");
            prop_assert!(Some(epoch) <= newest_committed, "deleted {} above newest committed", path);
            for kept in &plan.retained {
                if let ManifestState::Valid(m) = &l.epochs[kept].manifest {
                    prop_assert!(!m.files.iter().any(|f| &f.path == path), "deleted {} referenced by {}", path, kept);
                }
            }
        }
        // The retained set holds min(retain, usable) usable epochs.
        let usable_count = l.epochs.keys().filter(|e| usable(&l, **e)).count();
        let retained_usable = plan.retained.iter().filter(|e| usable(&l, **e)).count();
        prop_assert!(retained_usable >= retain.min(usable_count));
        // Applying the plan does not change where a restart resumes.
        let after = apply(&l, &plan.delete);
        let before_epoch = match decide_resume(&l) { ResumeDecision::Resume(p) => Some(p.epoch), _ => None };
        let after_epoch = match decide_resume(&after) { ResumeDecision::Resume(p) => Some(p.epoch), _ => None };
        prop_assert_eq!(before_epoch, after_epoch);
        // And gc is idempotent.
        let again = plan_gc(&after, retain);
        prop_assert!(again.delete.is_empty(), "second gc deletes {:?}", again.delete);
    }
}
