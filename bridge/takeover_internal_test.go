package bridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A takeover a rescan decided takes the epoch at the version it read and checks the holder
// after (takeHinted): it keeps the epoch of a holder whose registration is gone or newer than
// the epoch (a restarted holder's), gives a live holder's epoch back at once (released, so that
// the holder loads it again) and refuses the group, and looks again when the epoch moved.
func TestIntegration_TakeHintedChecksTheHolderAfterTaking(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	connect := zktest.Connect(t)
	open := func() *zkstate.Store { return zktest.OpenStore(t, connect) }
	store, holderSession := open(), open()
	const root, us, holder = "/zkbridge", int32(1), int32(2)
	register := func() {
		t.Helper()
		if err := holderSession.Create(ctx, zkstate.BridgePath(root, holder), []byte("{}"), zkstate.CreateOptions{Ephemeral: true, Parents: true}); err != nil {
			t.Fatal(err)
		}
	}
	// held writes the holder's epoch of g and returns the rescan's hint from reading it.
	held := func(g string) *takeoverHint {
		t.Helper()
		p := zkstate.EpochPath(root, g)
		data := zkstate.Epoch{NodeID: holder, AcquiredMs: time.Now().UnixMilli()}.Encode()
		if err := store.Create(ctx, p, data, zkstate.CreateOptions{Parents: true}); err != nil {
			t.Fatal(err)
		}
		_, st, err := store.Get(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return &takeoverHint{version: st.Version, mzxid: st.Mzxid, holder: holder}
	}
	epochOf := func(g string) zkstate.Epoch {
		t.Helper()
		data, _, err := store.Get(ctx, zkstate.EpochPath(root, g))
		if err != nil {
			t.Fatal(err)
		}
		e, err := zkstate.ParseEpoch(data)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	take := func(g string, h *takeoverHint) (*groupStore, bool, error) {
		gs := newGroupStore(store, root, g, us, zerolog.Nop())
		mine := zkstate.Epoch{NodeID: us, AcquiredMs: time.Now().UnixMilli()}.Encode()
		took, err := gs.takeHinted(ctx, zkstate.EpochPath(root, g), mine, h)
		return gs, took, err
	}

	// The holder is gone (never registered): the epoch is ours.
	if gs, took, err := take("gone", held("gone")); !took || err != nil || gs.epoch < 0 || epochOf("gone").NodeID != us {
		t.Errorf("gone holder: took %v, err %v, epoch %d, held by %d; want taken by %d", took, err, gs.epoch, epochOf("gone").NodeID, us)
	}

	// The holder wrote the epoch, then died and came back (a registration newer than the
	// epoch): its live session never held the group; the epoch is ours.
	h := held("restarted")
	register()
	if gs, took, err := take("restarted", h); !took || err != nil || gs.epoch < 0 || epochOf("restarted").NodeID != us {
		t.Errorf("restarted holder: took %v, err %v, epoch %d, held by %d; want taken by %d", took, err, gs.epoch, epochOf("restarted").NodeID, us)
	}

	// The live holder (registered before it wrote the epoch): given back, released, and the
	// group refused as owned by the holder.
	h = held("live")
	gs, took, err := take("live", h)
	var owned *OwnedError
	if !took || !errors.As(err, &owned) || owned.NodeID != holder {
		t.Errorf("live holder: took %v, err %v; want an OwnedError naming %d", took, err, holder)
	}
	if e := epochOf("live"); !e.Released || gs.epoch >= 0 {
		t.Errorf("live holder: epoch %+v, ours %d; want it released and not ours", e, gs.epoch)
	}

	// The epoch moved since it was read: nothing taken, no error (acquire looks again).
	h = held("moved")
	if _, err := store.Set(ctx, zkstate.EpochPath(root, "moved"), zkstate.Epoch{NodeID: holder, AcquiredMs: 1}.Encode(), h.version); err != nil {
		t.Fatal(err)
	}
	if _, took, err := take("moved", h); took || err != nil || epochOf("moved").NodeID != holder {
		t.Errorf("moved epoch: took %v, err %v, held by %d; want nothing taken", took, err, epochOf("moved").NodeID)
	}
}
