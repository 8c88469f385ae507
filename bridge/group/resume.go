package group

// Members resuming after a load (a takeover or a restart: Restore). Kafka's coordinator loads a
// group on failover and lets live members carry on with their generation; but a client whose
// heartbeat failed against the dead coordinator has already given its partitions up and rejoins
// with its member id. Kafka then rebalances: for a follower because its subscription now says
// it owns nothing (the cooperative and sticky assignors put owned partitions and the previous
// generation in it), for the leader because a leader's JoinGroup is how a client asks for one.
// franz-go does exactly this when the coordinator dies (its heartbeat's retry asks FindCoordinator
// of brokers that still name the dead one), so every failover cost a rebalance of static
// members whose session had not ended.
//
// The rule here spares that rebalance for static members (KIP-345), by Kafka's own rule for a
// static member that restarts: the first JoinGroup of a restored static member, before any
// Heartbeat or SyncGroup of its own at the new owner, whose subscription differs from the stored
// one only in what it says about the member's past (owned partitions, generation, user data), is
// a restart of that instance. It gets a new member id in the current generation, the old id is
// fenced, and its SyncGroup returns its assignment (replaceStaticMember: persisted first; a
// leader is told to skip the assignment, KIP-814, or named a follower before JoinGroup v9).
// Fencing the old id is what keeps offsets from moving backwards: the client's commit that was
// in flight to the dead owner is retried with the old id and would otherwise land after the
// commits of the resumed member (FENCED_INSTANCE_ID, which franz-go and the Java client take
// as a failed commit, not a reason to rejoin). Anything else — a dynamic member, another
// protocol type, other topics or rack, a second JoinGroup — follows Kafka's rule, and so does
// a mixed group (server-side assignment): its members must not consume before the bridge has
// claimed their partitions in ZooKeeper again, which only a new generation does.

import (
	"bytes"
	"slices"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// markResuming marks every member of a group just restored to Stable.
func (m *Machine) markResuming() {
	for _, mb := range m.members {
		mb.resuming = true
	}
}

// clearResuming ends every member's resumption (a rebalance began: everyone rejoins anyway).
func (m *Machine) clearResuming() {
	for _, mb := range m.members {
		mb.resuming = false
	}
}

// resume takes a restored static member's first JoinGroup in a Stable group as a restart of the
// instance when only the member's past changed in its subscription. It reports whether it did.
func (m *Machine) resume(mb *Member, ev JoinGroup) bool {
	if !mb.resuming {
		return false
	}
	mb.resuming = false
	if !mb.isStatic() || m.serverAssign || mb.ProtocolType != "consumer" || !sameSubscriptions(mb.Protocols, ev.Protocols) {
		return false
	}
	m.log("member resumes after the group's load: no rebalance", mb.ID, "")
	m.replaceStaticMember(mb.ID, m.newMemberID(ev), ev)
	return true
}

// sameSubscriptions reports whether two protocol lists name the same assignors in the same order
// with the same topics and rack (ConsumerProtocolSubscription), whatever they say of owned
// partitions, generation and user data. Undecodable metadata must be equal byte for byte.
func sameSubscriptions(stored, now []Protocol) bool {
	if len(stored) != len(now) {
		return false
	}
	for i := range stored {
		if stored[i].Name != now[i].Name {
			return false
		}
		if bytes.Equal(stored[i].Metadata, now[i].Metadata) {
			continue
		}
		var a, b kmsg.ConsumerMemberMetadata
		if a.ReadFrom(stored[i].Metadata) != nil || b.ReadFrom(now[i].Metadata) != nil {
			return false
		}
		if !slices.Equal(sortedCopy(a.Topics), sortedCopy(b.Topics)) || !equalRack(a.Rack, b.Rack) {
			return false
		}
	}
	return true
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

func equalRack(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// ownedAsAssigned is a member's consumer subscription as the leader told to skip the assignment
// (KIP-814) is shown it: owning what the current generation assigned it, in that generation.
// franz-go's leader balances anyway and rejoins, asking for a rebalance, when its own share of
// that plan differs from the assignment its SyncGroup returns; balanced from the stored
// subscriptions, which say what each member owned before the generation's last rebalance (or,
// for a member that resumed after a crash, nothing), the plan can differ although nothing
// changed. A subscription that cannot carry owned partitions (version 0), or that does not
// decode, or an assignment that does not, is left as it is.
func ownedAsAssigned(meta, assignment []byte, gen Generation) []byte {
	var sub kmsg.ConsumerMemberMetadata
	var as kmsg.ConsumerMemberAssignment
	if sub.ReadFrom(meta) != nil || sub.Version < 1 || as.ReadFrom(assignment) != nil {
		return meta
	}
	sub.OwnedPartitions = sub.OwnedPartitions[:0]
	for _, t := range as.Topics {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic, o.Partitions = t.Topic, slices.Clone(t.Partitions)
		sub.OwnedPartitions = append(sub.OwnedPartitions, o)
	}
	sub.Generation = int32(gen)
	return sub.AppendTo(nil)
}
