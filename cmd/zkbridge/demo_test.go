package main

import (
	"strings"
	"testing"

	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// The README's run command end to end (issue 6 item 5, issue 7 item 5): records through the
// bridge to the stand-in cluster, then group demo-migrate from a 0.8 and a legacy consumer to a
// Kafka consumer and back, each step's owners and offsets printed, nothing lost.
func TestIntegration_DemoWithKafkaTellsTheMigration(t *testing.T) {
	zkc := zktest.Connect(t)
	r := runCLI(t, "demo", "--with-kafka", "--zk", zkc)
	if r.code != exitOK {
		t.Fatalf("demo --with-kafka: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"12 records produced through the bridge",
		"== 1. group demo-migrate in legacy mode",
		"demo-migrate_zk1  zk ",
		"legacy1           legacy",
		"== 2. migrated to mixed",
		"Group demo-migrate: 3 members, 6 partitions, 0 unowned",
		"it started after the offsets the old consumers committed",
		"== 3. the old consumers stopped; migrated to kafka",
		"== 4. rolled back to mixed, then to legacy",
		"the 0.8 consumer resumed at orders/0@",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("demo output lacks %q:\n%s", want, r.stdout)
		}
	}
	// Step 2's Kafka consumer read each of its partitions at offset 1, after the record the
	// old consumers committed (offset 0); step 4's 0.8 consumer resumes past everything read.
	if !strings.Contains(r.stdout, "the Kafka consumer read orders/0@1") {
		t.Errorf("the Kafka consumer did not resume at the old consumers' commits:\n%s", r.stdout)
	}
}
