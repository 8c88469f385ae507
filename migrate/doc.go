// Package migrate moves consumer groups between modes (DESIGN §1 and §2): legacy →
// mixed → kafka → finalized, and back kafka → mixed → legacy until finalized.
//
// It has three layers, as the rest of the project does (decide in pure code, act in thin
// shells):
//
//   - ReadCensus (census.go) reads what ZooKeeper says about a group: its mode, its members by
//     kind (from /consumers/<g>/ids, the bridges' hosted-member znodes and the group record),
//     and, on request, whether the 0.8 mirror of its offsets is current.
//   - Plan (plan.go) is pure: from a Census and a Request it computes the steps to the target
//     mode and the preconditions that block each step. It is table-tested without ZooKeeper.
//   - Apply (apply.go) walks groups through their plans with zkstate.SetMode, one
//     compare-and-set per step, re-reading and re-planning before every step, so that a
//     concurrent applier, an operator's rollback or a member that joined in the meantime is
//     seen. It is resumable by construction: everything it knows is in ZooKeeper, so a re-run
//     skips the groups already at the target.
//
// The offsets helpers (offsets.go) read a group's committed offsets where its mode keeps them
// (the 0.8 layout, or the bridge's own records once finalized), diff an import against them and
// write it with compare-and-set; handoff.go records a handoff to a real Kafka cluster.
//
// The package imports zkstate only (DESIGN §2), which states the bridge's own records it reads
// (paths, the group record's head, the epoch, the offset records) and the rule that decides a
// committed offset (zkstate.OffsetPair.Fetch), once for the bridge, migrate and the CLI.
package migrate
