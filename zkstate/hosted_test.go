package zkstate

import (
	"errors"
	"testing"
)

func TestHostedMemberRoundTrip(t *testing.T) {
	for _, h := range []HostedMember{
		{Kind: KindKafka, Node: 9000, Member: "kgo-1", Instance: "i-1"},
		{Kind: KindLegacy, Node: 1, Member: "c1"},
	} {
		got, err := ParseHostedMember(h.Encode())
		if err != nil || got != h {
			t.Fatalf("round trip of %+v: %+v, %v", h, got, err)
		}
	}
	for _, bad := range []string{``, `{}`, `{"version":1,"kind":"zk"}`, `{"version":0,"kind":"kafka"}`, `[1]`} {
		if _, err := ParseHostedMember([]byte(bad)); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseHostedMember(%q) = %v, want ErrMalformed", bad, err)
		}
	}
	if got := HostedMemberPath("/zkbridge", "g", "c-1"); got != "/zkbridge/groups/g/hosted/c-1" {
		t.Errorf("HostedMemberPath = %q", got)
	}
}
