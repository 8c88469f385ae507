package zkstate

// Hosted members: which kind of member stands behind a registration in /consumers/<g>/ids.
//
// A bridge registers every member it hosts in /consumers/<g>/ids in the 0.8 format, so that
// zk members count it in their 0.8.2 assignment; the 0.8 format has no room to say what kind of member
// a registration is, and adding keys to it would change what 0.8-era tools read. So beside each
// such registration the bridge writes, as an ephemeral of the same session,
//
//	<root>/groups/<g>/hosted/<consumer-id>   JSON HostedMember
//
// A registration in /ids without a hosted znode of the same name is a zk member (an unmodified
// 0.8 consumer, or a registration someone wrote by hand). This is what `zkbridge migrate` counts
// to decide whether a group may move to kafka mode, and what `groups describe` shows as a
// member's kind.

import (
	"encoding/json"
	"fmt"
	"path"
)

// Member kinds (DESIGN §1).
const (
	KindKafka  = "kafka"
	KindLegacy = "legacy"
	KindZK     = "zk"
)

// HostedMember is the JSON of <root>/groups/<g>/hosted/<consumer-id>:
//
//	{"version":1,"kind":"kafka","node":9000,"member":"kgo-3f2a…","instance":"billing-1"}
type HostedMember struct {
	Kind string // KindKafka or KindLegacy
	// Node is the node id of the bridge that hosts the member.
	Node int32
	// Member is the member's own name in its protocol: the Kafka member id, or the legacy
	// consumer id (then equal to the znode name).
	Member string
	// Instance is the Kafka group.instance.id of a static member, "" otherwise.
	Instance string
}

type hostedJSON struct {
	Version  int    `json:"version"`
	Kind     string `json:"kind"`
	Node     int32  `json:"node"`
	Member   string `json:"member,omitempty"`
	Instance string `json:"instance,omitempty"`
}

// HostedPath is <root>/groups/<group>/hosted, the parent of the hosted-member znodes.
func HostedPath(root, group string) string {
	return path.Join(BridgeGroupsPath(root), group, "hosted")
}

// HostedMemberPath is <root>/groups/<group>/hosted/<consumerID>.
func HostedMemberPath(root, group, consumerID string) string {
	return path.Join(HostedPath(root, group), consumerID)
}

// Encode writes the record's JSON.
func (h HostedMember) Encode() []byte {
	b, _ := json.Marshal(hostedJSON{Version: 1, Kind: h.Kind, Node: h.Node, Member: h.Member, Instance: h.Instance})
	return b
}

// ParseHostedMember reads one hosted-member znode. Errors wrap ErrMalformed.
func ParseHostedMember(data []byte) (HostedMember, error) {
	var j hostedJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return HostedMember{}, fmt.Errorf("%w: hosted member: %v", ErrMalformed, err)
	}
	if j.Version < 1 {
		return HostedMember{}, fmt.Errorf("%w: hosted member version %d", ErrMalformed, j.Version)
	}
	if j.Kind != KindKafka && j.Kind != KindLegacy {
		return HostedMember{}, fmt.Errorf("%w: hosted member kind %q", ErrMalformed, j.Kind)
	}
	return HostedMember{Kind: j.Kind, Node: j.Node, Member: j.Member, Instance: j.Instance}, nil
}
