package bridge

import (
	"context"
	"maps"

	"github.com/zkbridge/zkbridge/zkstate"
)

// releaseAll deletes every ephemeral the group's Kafka members hold here (the 0.8 mirror's
// registrations, hosted-member and owner znodes, and the creates whose outcome is unknown) in
// two ZooKeeper round trips (zkstate.Store.DeleteEphemerals), with the same checks as reconcile's
// deletes one by one: an owner znode only while it holds the thread we wrote, every node only
// while our session holds it. A handover releases the group's epoch only after its mirror, and
// one by one a mirror of six partitions and two members took a score of round trips in a row
// before the next owner could load the group. It reports false, having deleted nothing, when the
// batch failed (a node changed between its read and its delete, or ZooKeeper failed): the caller
// then deletes one by one.
//
// also (a handover's release of the group's epoch, which must come no earlier than the mirror's
// release) goes in the same Multi: applied reports that it did, one round trip sooner than a
// write after the Multi; not applied, the caller writes it itself.
func (cl *claimer) releaseAll(ctx context.Context, also []zkstate.Op) (ok, applied bool) {
	k := &cl.kafka
	nodes := make(map[string][]byte, len(k.held.owners)+len(k.held.ids)+len(k.unsure))
	maps.Copy(nodes, k.unsure)
	maps.Copy(nodes, k.held.owners)
	for p := range k.held.ids {
		nodes[p] = nil // any data, as DeleteEphemeral
	}
	if len(nodes) == 0 {
		return true, false
	}
	if _, err := cl.store.DeleteEphemerals(ctx, nodes, also...); err != nil {
		cl.log.Debug().Err(err).Int("znodes", len(nodes)).Msg("0.8 mirror: releasing in one batch failed; one by one")
		return false, false
	}
	owners := len(k.held.owners) > 0
	k.held.owners, k.held.ids = map[string][]byte{}, map[string][]byte{}
	clear(k.unsure)
	if owners {
		cl.wakeLegacy()
	}
	cl.publishOurs(nil, nil)
	return true, len(also) > 0
}
