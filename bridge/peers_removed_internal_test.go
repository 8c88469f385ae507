package bridge

import (
	"testing"

	"github.com/zkbridge/zkbridge/zkstate"
)

// A change of <root>/bridges' children that only removes some is applied from the
// registrations known; one that adds a child, or leaves one whose registration is not known,
// is read in full.
func TestRemovedChildrenNeedNoRead(t *testing.T) {
	known := map[string]zkstate.Read{"9001": {Data: []byte("a")}, "9002": {Data: []byte("b")}, "9003": {Data: []byte("c")}}
	tests := []struct {
		name          string
		known         map[string]zkstate.Read
		was, children []string
		want          []string // the children left, nil: read in full
	}{
		{name: "one gone", known: known, was: []string{"9001", "9002", "9003"}, children: []string{"9001", "9002"}, want: []string{"9001", "9002"}},
		{name: "all gone", known: known, was: []string{"9001", "9002", "9003"}, children: []string{}, want: []string{}},
		{name: "one gone, one new", known: known, was: []string{"9001", "9002", "9003"}, children: []string{"9001", "9004"}},
		{name: "one new", known: known, was: []string{"9001", "9002"}, children: []string{"9001", "9002", "9003"}},
		{name: "unchanged", known: known, was: []string{"9001", "9002"}, children: []string{"9001", "9002"}},
		{name: "left one not known", known: map[string]zkstate.Read{"9001": {}}, was: []string{"9001", "9002", "9003"}, children: []string{"9001", "9002"}},
		{name: "last read failed", was: []string{"9001", "9002"}, children: []string{"9001"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			left, ok := removed(tt.known, tt.was, tt.children)
			if ok != (tt.want != nil) {
				t.Fatalf("removed = %v, %v; want applied without a read: %v", left, ok, tt.want != nil)
			}
			if !ok {
				return
			}
			if len(left) != len(tt.want) {
				t.Fatalf("left = %v, want %v", left, tt.want)
			}
			for _, c := range tt.want {
				if _, in := left[c]; !in || string(left[c].Data) != string(known[c].Data) {
					t.Errorf("left = %v, want %v as known", left, tt.want)
				}
			}
		})
	}
}
