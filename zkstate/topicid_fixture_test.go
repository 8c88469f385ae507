package zkstate_test

import (
	"testing"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// A Layout with TopicIDs writes its topics as Kafka 2.8+ does, and reads back with the ids; one
// without writes them as before.
func TestIntegration_LayoutTopicIDs(t *testing.T) {
	connect := zktest.Connect(t)
	s := zktest.OpenStore(t, connect)
	ctx := timeout(t, 30*time.Second)

	l := zkstate.ExampleLayout()
	l.TopicIDs = true
	payments := l.Topics["payments"]
	payments.TopicID = [16]byte{15: 7}
	l.Topics["payments"] = payments
	if err := zkstate.LoadLayout(ctx, s, l); err != nil {
		t.Fatal(err)
	}
	data, _, err := s.Get(ctx, zkstate.TopicPath("orders"))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":3,"partitions":{"0":[1,2],"1":[2,3],"2":[3,1],"3":[1,2],"4":[2,3],"5":[3,1]},` +
		`"adding_replicas":{},"removing_replicas":{},"topic_id":"` + zkstate.FormatTopicID(zkstate.LayoutTopicID("orders")) + `"}`
	if string(data) != want {
		t.Errorf("orders znode\n got %s\nwant %s", data, want)
	}
	topics, problems, err := s.Topics(ctx)
	if err != nil || len(problems) != 0 {
		t.Fatalf("Topics: %v, problems %v", err, problems)
	}
	for name, id := range map[string][16]byte{"orders": zkstate.LayoutTopicID("orders"), "payments": {15: 7}} {
		if a := topics[name]; a.TopicID != id || a.Version != 3 {
			t.Errorf("%s: version %d id %x, want 3 and %x", name, a.Version, a.TopicID, id)
		}
	}

	if err := zkstate.LoadLayout(ctx, s, zkstate.ExampleLayout()); err != nil {
		t.Fatal(err)
	}
	topics, _, err = s.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if a := topics["orders"]; a.TopicID != ([16]byte{}) || a.Version != 1 {
		t.Errorf("without TopicIDs: version %d id %x, want 1 and none", a.Version, a.TopicID)
	}
}
