package bridge

// No silent bypass of the bridge. Without the relay, Metadata lists the brokers registered in
// ZooKeeper next to the bridge, and a client may send FindCoordinator to one of them: its group
// is then coordinated by the real cluster (no 0.8 mirror, no mixed group, nothing logged). So:
//
//   - With Config.UpstreamAuto (the serve command's default) the bridge relays to the
//     registered brokers whenever there are any at start, as UpstreamFromZK does: every broker
//     address a client learns is a bridge listener.
//   - Serving groups only next to registered brokers (--group-only, or a library Config without
//     an upstream) is for tests and demos: the bridge says at start and in every /readyz that
//     clients may bypass it.

import (
	"context"
	"fmt"

	"github.com/zkbridge/zkbridge/zkstate"
)

// chooseRelay turns UpstreamAuto into UpstreamFromZK when brokers are registered, and warns
// when the bridge serves groups only next to registered brokers. It runs in Run before any
// goroutine reads the configuration.
func (b *Bridge) chooseRelay(ctx context.Context, store *zkstate.Store) {
	if b.cfg.relayEnabled() {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.LoadTimeout)
	defer cancel()
	brokers, err := b.registeredBrokers(rctx, store)
	if err != nil {
		b.log.Warn().Err(err).Msg("cannot read /brokers/ids to decide whether to relay; serving groups only")
		return
	}
	if len(brokers) == 0 {
		return
	}
	if b.cfg.UpstreamAuto {
		b.cfg.UpstreamFromZK, b.coord.cfg.UpstreamFromZK = true, true
		b.log.Info().Int("brokers", len(brokers)).Msg("brokers are registered in /brokers/ids: relaying to them (--group-only to serve groups only)")
		return
	}
	note := fmt.Sprintf("serving groups only next to %d brokers registered in %s: Metadata lists them, so a client may find its group coordinator on a broker and bypass the bridge (no 0.8 mirror, no mixed group); relay to them (drop --group-only, or --upstream-from-zk) unless this is a test or a demo",
		len(brokers), zkstate.BrokerIDsPath)
	b.groupOnlyNote.Store(&note)
	b.log.Warn().Msg(note)
}

// readinessNotes are what /readyz says besides "ok".
func (b *Bridge) readinessNotes() []string {
	var notes []string
	if n := b.groupOnlyNote.Load(); n != nil {
		notes = append(notes, *n)
	}
	return append(notes, b.modes.corruptNotes()...) // modes.go
}
