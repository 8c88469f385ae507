package placement

import (
	"bufio"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/owners.golden")

func groups(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("orders-consumer-%d", i)
	}
	return out
}

// The owners are a fact every bridge must compute alike, across versions: a change here is a new
// placement Version (see the package comment), never a silent edit of the golden file.
func TestOwnerGolden(t *testing.T) {
	nodes := []int32{9001, 9002, 9003}
	var b strings.Builder
	for _, g := range append([]string{"", "a", "billing", "billing-v2", "demo-migrate"}, groups(40)...) {
		o, _ := Owner(g, nodes)
		fmt.Fprintf(&b, "%q %d\n", g, o)
	}
	golden := filepath.Join("testdata", "owners.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != string(want) {
		t.Fatalf("owners changed (run with -update only for a new placement Version):\n%s", diffLines(string(want), got))
	}
}

func diffLines(want, got string) string {
	var out strings.Builder
	w := bufio.NewScanner(strings.NewReader(want))
	g := bufio.NewScanner(strings.NewReader(got))
	for w.Scan() {
		g.Scan()
		if w.Text() != g.Text() {
			fmt.Fprintf(&out, "- %s\n+ %s\n", w.Text(), g.Text())
		}
	}
	return out.String()
}

func TestOwnerNone(t *testing.T) {
	if _, ok := Owner("g", nil); ok {
		t.Fatal("an empty node set has an owner")
	}
	if r := Ranked("g", nil); len(r) != 0 {
		t.Fatalf("Ranked(nil) = %v", r)
	}
}

// Every bridge reads the live set in its own order (ZooKeeper's children are unordered).
func TestOwnerIgnoresOrderAndDuplicates(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	nodes := []int32{9001, 9002, 9003, 9004, 9005}
	for _, g := range groups(500) {
		want, _ := Owner(g, nodes)
		shuffled := append([]int32(nil), nodes...)
		shuffled = append(shuffled, nodes[rng.IntN(len(nodes))])
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got, _ := Owner(g, shuffled); got != want {
			t.Fatalf("group %q: owner %d in %v, %d in %v", g, got, shuffled, want, nodes)
		}
		r := Ranked(g, shuffled)
		if len(r) != len(nodes) || r[0] != want {
			t.Fatalf("group %q: Ranked %v, owner %d", g, r, want)
		}
	}
}

// Ranked names the successor: removing the owner makes the second-ranked node the owner.
func TestRankedIsTheFailoverOrder(t *testing.T) {
	nodes := []int32{1, 2, 3, 4}
	for _, g := range groups(300) {
		r := Ranked(g, nodes)
		rest := r[1:]
		if got, _ := Owner(g, rest); got != r[1] {
			t.Fatalf("group %q: ranked %v, owner without %d is %d", g, r, r[0], got)
		}
	}
}

func TestBalance(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5} {
		nodes := make([]int32, n)
		for i := range nodes {
			nodes[i] = int32(9001 + i)
		}
		gs := groups(30000)
		count := map[int32]int{}
		for _, g := range gs {
			o, _ := Owner(g, nodes)
			count[o]++
		}
		fair := float64(len(gs)) / float64(n)
		for _, id := range nodes {
			if dev := (float64(count[id]) - fair) / fair; dev > 0.05 || dev < -0.05 {
				t.Errorf("%d nodes: node %d owns %d groups, %.1f%% off the fair %.0f", n, id, count[id], 100*dev, fair)
			}
		}
	}
}

// A joining node takes groups only for itself; a leaving node gives up only its own.
func TestMinimalMovement(t *testing.T) {
	gs := groups(20000)
	three := []int32{9001, 9002, 9003}
	four := append(append([]int32(nil), three...), 9004)
	moved := 0
	for _, g := range gs {
		a, _ := Owner(g, three)
		b, _ := Owner(g, four)
		if a != b {
			moved++
			if b != 9004 {
				t.Fatalf("group %q moved from %d to %d when 9004 joined", g, a, b)
			}
		}
	}
	if share := float64(moved) / float64(len(gs)); share < 0.22 || share > 0.28 {
		t.Errorf("a 4th node took %.1f%% of the groups, want about 25%%", 100*share)
	}
	if got := Moves(gs, three, four); got != moved {
		t.Errorf("Moves = %d, counted %d", got, moved)
	}
	for _, g := range gs {
		a, _ := Owner(g, four)
		b, _ := Owner(g, three)
		if a != 9004 && a != b {
			t.Fatalf("group %q moved from %d to %d when 9004 left", g, a, b)
		}
	}
}

func BenchmarkOwner3(b *testing.B) {
	nodes := []int32{9001, 9002, 9003}
	gs := groups(1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		Owner(gs[i&1023], nodes)
	}
}

// BenchmarkJoinMoves reports the share of 10,000 groups that move when a 4th bridge joins three
// (issue target: at most 30 %).
func BenchmarkJoinMoves(b *testing.B) {
	gs := groups(10000)
	three := []int32{9001, 9002, 9003}
	four := []int32{9001, 9002, 9003, 9004}
	var moved int
	for b.Loop() {
		moved = Moves(gs, three, four)
	}
	b.ReportMetric(100*float64(moved)/float64(len(gs)), "%moved")
}

// An upstream broker is served by the first node in its ranking that listens for it: the
// broker's Owner when every node does, the next in rank when that one does not.
func TestServer(t *testing.T) {
	nodes := []int32{9001, 9002, 9003}
	for id := range int32(20) {
		all := func(int32) bool { return true }
		got, ok := Server(id, nodes, all)
		if want, _ := Owner(BrokerKey(id), nodes); !ok || got != want {
			t.Errorf("broker %d: Server %d, %v; want the owner of %q, %d", id, got, ok, BrokerKey(id), want)
		}
		notOwner := func(n int32) bool { return n != got }
		if next, ok := Server(id, nodes, notOwner); !ok || next != Ranked(BrokerKey(id), nodes)[1] {
			t.Errorf("broker %d without %d listening: Server %d, %v; want the next in rank", id, got, next, ok)
		}
	}
	if _, ok := Server(1, nodes, func(int32) bool { return false }); ok {
		t.Error("Server with no node listening reported one")
	}
}

// Servers balances: no node serves more than its share of the brokers (rounded up), whatever the
// brokers' ids and the nodes' order; it gives each broker to a node that listens for it, and to
// the first of its ranking that listens when that one has room (with as many nodes as brokers,
// every broker whose owner is free goes to its owner).
func TestServers(t *testing.T) {
	all := func(int32, int32) bool { return true }
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		nodes := []int32{9001, 9002, 9003}
		if trial%3 == 1 {
			nodes = []int32{9001, 9002, 9003, 9004}
		}
		r.Shuffle(len(nodes), func(i, j int) { nodes[i], nodes[j] = nodes[j], nodes[i] })
		var ids []int32
		for range 1 + r.IntN(9) {
			ids = append(ids, r.Int32N(50))
		}
		got := Servers(ids, nodes, all)
		distinct := map[int32]bool{}
		for _, id := range ids {
			distinct[id] = true
		}
		if len(got) != len(distinct) {
			t.Fatalf("brokers %v over %v: %d served (%v), want %d", ids, nodes, len(got), got, len(distinct))
		}
		share := (len(distinct) + len(nodes) - 1) / len(nodes)
		load := map[int32]int{}
		for _, n := range got {
			load[n]++
		}
		for n, c := range load {
			if c > share {
				t.Fatalf("brokers %v over %v: %d serves %d (%v), want at most %d", ids, nodes, n, c, got, share)
			}
		}
		reversed := slices.Clone(nodes)
		slices.Reverse(reversed)
		if again := Servers(ids, reversed, all); !maps.Equal(again, got) {
			t.Fatalf("brokers %v: %v over %v, %v over %v", ids, got, nodes, again, reversed)
		}
	}
	// Listening counts: a node that does not listen for a broker never serves it, even with room.
	nodes := []int32{9001, 9002, 9003}
	only := func(n, id int32) bool { return n == 9001 || id != 1 }
	got := Servers([]int32{0, 1, 2}, nodes, only)
	if got[1] != 9001 {
		t.Errorf("broker 1, which only 9001 listens for: served by %d", got[1])
	}
	if _, ok := Servers([]int32{4}, nodes, func(int32, int32) bool { return false })[4]; ok {
		t.Error("a broker no node listens for was served")
	}
	if got := Servers([]int32{1, 2}, nil, all); len(got) != 0 {
		t.Errorf("no nodes: %v", got)
	}
}

// ServersBy follows the oldest rule the live bridges advertise: Server one broker at a time
// below BrokerVersion (a bridge from before the balanced rule computes just that), Servers from it.
func TestServersBy(t *testing.T) {
	nodes := []int32{9001, 9002, 9003}
	all := func(int32, int32) bool { return true }
	ids := []int32{0, 1, 2, 3, 4, 5}
	for _, rule := range []int{0, 1} {
		got := ServersBy(rule, ids, nodes, all)
		for _, id := range ids {
			if want, _ := Server(id, nodes, func(int32) bool { return true }); got[id] != want {
				t.Errorf("rule %d: broker %d served by %d, want Server's %d", rule, id, got[id], want)
			}
		}
	}
	if got, want := ServersBy(BrokerVersion, ids, nodes, all), Servers(ids, nodes, all); !maps.Equal(got, want) {
		t.Errorf("rule %d: %v, want Servers' %v", BrokerVersion, got, want)
	}
}
