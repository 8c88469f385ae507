package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

const root = "/zkbridge"

func TestMain(m *testing.M) { os.Exit(zktest.Main(m)) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// member is a simulated member of a group: a registration in /ids, with a hosted znode unless
// it is a zk member (kind "zk"); a kind "record" member is written in the group record only.
type member struct{ kind, id string }

// seed writes a group: its mode record (none when mode is ""), and members as a bridge and 0.8
// consumers would leave them. Registrations and hosted znodes are persistent here (the test's
// session stands for every member's).
func seed(t testing.TB, s *zkstate.Store, group string, mode zkstate.Mode, members ...member) {
	t.Helper()
	ctx := testCtx(t)
	var ops []zkstate.Op
	parents := zkstate.CreateOptions{Parents: true}
	var recordMembers []string
	for _, m := range members {
		switch m.kind {
		case "record":
			recordMembers = append(recordMembers, m.id)
			continue
		case zkstate.KindKafka, zkstate.KindLegacy:
			h := zkstate.HostedMember{Kind: m.kind, Node: 9000, Member: "member-" + m.id}
			ops = append(ops, zkstate.CreateOp(zkstate.HostedMemberPath(root, group, m.id), h.Encode(), parents))
		}
		reg := zkstate.ConsumerRegistration{Version: 1, Subscription: map[string]int{"t": 1}, Pattern: zkstate.PatternStatic, TimestampMs: 1700000000000}
		ops = append(ops, zkstate.CreateOp(zkstate.IDPath(group, m.id), reg.Encode(), parents))
	}
	if recordMembers != nil {
		ops = append(ops, zkstate.CreateOp(zkstate.GroupRecordPath(root, group), recordJSON(group, recordMembers...), parents))
	}
	if len(ops) > 0 {
		if err := s.Multi(ctx, ops...); err != nil {
			t.Fatal(err)
		}
	}
	if mode != "" {
		if _, _, err := zkstate.InitMode(ctx, s, root, group, mode, "test-seed", "seeded"); err != nil {
			t.Fatal(err)
		}
	}
}

// recordJSON is a group record as bridge/group.Record marshals it.
func recordJSON(group string, members ...string) []byte {
	ms := ""
	for i, m := range members {
		if i > 0 {
			ms += ","
		}
		ms += fmt.Sprintf(`{"id":%q,"kind":"kafka","client_id":"c","client_host":"/127.0.0.1","session_timeout_ms":45000,"rebalance_timeout_ms":60000,"protocol_type":"consumer","protocols":[{"name":"range","metadata":null}],"assignment":null}`, m)
	}
	leader := ""
	if len(members) > 0 {
		leader = members[0]
	}
	return fmt.Appendf(nil, `{"version":1,"group":%q,"generation":3,"protocol_type":"consumer","protocol_name":"range","leader":%q,"members":[%s]}`, group, leader, ms)
}

func removeMember(t testing.TB, s *zkstate.Store, group, id string) {
	t.Helper()
	ctx := testCtx(t)
	for _, p := range []string{zkstate.HostedMemberPath(root, group, id), zkstate.IDPath(group, id)} {
		if err := s.Delete(ctx, p, -1); err != nil && !isNoNode(err) {
			t.Fatal(err)
		}
	}
}

func modeOf(t testing.TB, s *zkstate.Store, group string) (zkstate.Mode, int32) {
	t.Helper()
	rec, v, ok, err := zkstate.ReadMode(testCtx(t), s, root, group)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "", v
	}
	return rec.Mode, v
}

// steps lists the group's recorded transitions as "from→to" (the first mode's as "→to").
func steps(t testing.TB, s *zkstate.Store, group string) []string {
	t.Helper()
	trs, err := zkstate.ReadTransitions(testCtx(t), s, root, group)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, tr := range trs {
		out = append(out, string(tr.From)+"→"+string(tr.To))
	}
	return out
}

func applyOpts(target zkstate.Mode) migrate.ApplyOptions {
	return migrate.ApplyOptions{Request: migrate.Request{Target: target}, Who: "test@host", Poll: 20 * time.Millisecond}
}

func isNoNode(err error) bool { return errors.Is(err, zkstate.ErrNoNode) }
