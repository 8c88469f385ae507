package zkstate

// The bridge's own records (DESIGN §4), under a root that every bridge of one service shares
// (default /zkbridge). The bridge writes them; migrate and the CLI read them; every path and
// format is stated here once:
//
//	<root>/bridges/<node-id>                        ephemeral: a running bridge and its addresses
//	<root>/groups/<g>/epoch                         JSON Epoch: which bridge holds the group
//	<root>/groups/<g>/record                        JSON: the group engine's record
//	<root>/groups/<g>/offsets/<topic>/<partition>   JSON OwnOffset
//	<root>/groups/<g>/hosted/<consumer-id>          JSON HostedMember (hosted.go)
//	<root>/groups/<g>/mode, transitions/t-<seq>     JSON ModeRecord, Transition (mode.go)
//
// The group record is the engine's (bridge/group.Record, which encodes itself: the engine
// imports only the standard library); GroupRecordHead is the part of it other readers use.

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"
)

// BridgesPath is <root>/bridges, the parent of the running bridges' registrations.
func BridgesPath(root string) string { return path.Join(root, "bridges") }

// BridgePath is <root>/bridges/<node-id>: an ephemeral of the bridge's session, so its
// EphemeralOwner is that session and its absence means the bridge is gone.
func BridgePath(root string, node int32) string {
	return path.Join(BridgesPath(root), strconv.Itoa(int(node)))
}

// BridgeGroupPath is <root>/groups/<group>, the parent of every record of one group.
func BridgeGroupPath(root, group string) string { return path.Join(BridgeGroupsPath(root), group) }

// EpochPath is <root>/groups/<group>/epoch. Its znode version fences the group's writes: a
// bridge that takes the group over sets it (bumping the version), and every later write of
// the group is a multi that first checks that version (the scheme of Kafka's ZooKeeper-to-KRaft
// migration, which guards every write with the controller epoch znode's version).
func EpochPath(root, group string) string { return path.Join(BridgeGroupPath(root, group), "epoch") }

// GroupRecordPath is <root>/groups/<group>/record: the group engine's record (generation,
// Kafka members and their assignments).
func GroupRecordPath(root, group string) string {
	return path.Join(BridgeGroupPath(root, group), "record")
}

// OwnOffsetsPath is <root>/groups/<group>/offsets, the parent of the bridge's offset records.
func OwnOffsetsPath(root, group string) string {
	return path.Join(BridgeGroupPath(root, group), "offsets")
}

// OwnOffsetsTopicPath is <root>/groups/<group>/offsets/<topic>.
func OwnOffsetsTopicPath(root, group, topic string) string {
	return path.Join(OwnOffsetsPath(root, group), topic)
}

// OwnOffsetPath is <root>/groups/<group>/offsets/<topic>/<partition>.
func OwnOffsetPath(root, group, topic string, partition int32) string {
	return path.Join(OwnOffsetsTopicPath(root, group, topic), strconv.Itoa(int(partition)))
}

// Epoch is the JSON of <root>/groups/<g>/epoch: which bridge took the group over, and when.
//
//	{"version":1,"node_id":9000,"acquired":"1700000000000"}
//
// A bridge that hands the group over to another (placement, bridge/placement.go) writes its
// own epoch again with "released":true: the next owner may take it at once, though the
// releasing bridge is alive, and the write bumps the version, fencing the releaser's own
// writes.
type Epoch struct {
	NodeID     int32
	AcquiredMs int64 // Unix milliseconds, written as a string
	Released   bool
}

type epochJSON struct {
	Version  int    `json:"version"`
	NodeID   *int32 `json:"node_id"`
	Acquired string `json:"acquired"`
	Released bool   `json:"released,omitempty"`
}

// Encode writes the epoch's JSON.
func (e Epoch) Encode() []byte {
	node := e.NodeID
	b, _ := json.Marshal(epochJSON{Version: 1, NodeID: &node, Acquired: strconv.FormatInt(e.AcquiredMs, 10), Released: e.Released})
	return b
}

// ParseEpoch reads an epoch znode. A znode without a node id names no holder: an error, as
// is anything that is not a JSON object. Errors wrap ErrMalformed.
func ParseEpoch(data []byte) (Epoch, error) {
	if _, err := decodeObject(data); err != nil {
		return Epoch{}, fmt.Errorf("group epoch: %w", err)
	}
	var j epochJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return Epoch{}, fmt.Errorf("%w: group epoch: %v", ErrMalformed, err)
	}
	if j.NodeID == nil {
		return Epoch{}, fmt.Errorf("%w: group epoch names no node_id", ErrMalformed)
	}
	e := Epoch{NodeID: *j.NodeID, Released: j.Released}
	if j.Acquired != "" {
		ms, err := strconv.ParseInt(j.Acquired, 10, 64)
		if err != nil {
			return Epoch{}, fmt.Errorf("%w: group epoch acquired %q", ErrMalformed, j.Acquired)
		}
		e.AcquiredMs = ms
	}
	return e, nil
}

// GroupRecordHead is the part of a group record (<root>/groups/<g>/record) that readers other
// than the group engine use: which group, whether it was deleted, and its members.
type GroupRecordHead struct {
	Group        string
	ProtocolType string
	// Deleted marks the record of a deleted group, written in the moment before it is removed.
	Deleted bool
	Members []GroupRecordMember
}

// GroupRecordMember is one member of a GroupRecordHead.
type GroupRecordMember struct {
	ID         string // the Kafka member id
	InstanceID string // group.instance.id of a static member (KIP-345), "" otherwise
	Kind       string // KindKafka
}

type groupRecordJSON struct {
	Group        string `json:"group"`
	ProtocolType string `json:"protocol_type"`
	Deleted      bool   `json:"deleted"`
	Members      []struct {
		ID         string `json:"id"`
		InstanceID string `json:"instance_id"`
		Kind       string `json:"kind"`
	} `json:"members"`
}

// ParseGroupRecordHead reads the head of a group record; the engine's other fields are left
// to it. Errors wrap ErrMalformed.
func ParseGroupRecordHead(data []byte) (GroupRecordHead, error) {
	if _, err := decodeObject(data); err != nil {
		return GroupRecordHead{}, fmt.Errorf("group record: %w", err)
	}
	var j groupRecordJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return GroupRecordHead{}, fmt.Errorf("%w: group record: %v", ErrMalformed, err)
	}
	h := GroupRecordHead{Group: j.Group, ProtocolType: j.ProtocolType, Deleted: j.Deleted}
	for _, m := range j.Members {
		h.Members = append(h.Members, GroupRecordMember{ID: m.ID, InstanceID: m.InstanceID, Kind: m.Kind})
	}
	return h, nil
}

// OwnOffset is the JSON of the bridge's record of one committed offset,
// <root>/groups/<g>/offsets/<t>/<p>: what the 0.8 znode beside it cannot hold. Offset repeats
// the 0.8 value so that a reader can tell whether a 0.8 consumer committed since (then the
// leader epoch and metadata are no longer this offset's).
//
//	{"version":1,"offset":1200,"leader_epoch":-1,"metadata":"","commit_timestamp":"1700000000000"}
type OwnOffset struct {
	Offset      int64
	LeaderEpoch int32
	Metadata    string
	CommittedMs int64 // Unix milliseconds, written as a string
}

type ownOffsetJSON struct {
	Version     int    `json:"version"`
	Offset      int64  `json:"offset"`
	LeaderEpoch int32  `json:"leader_epoch"`
	Metadata    string `json:"metadata"`
	Committed   string `json:"commit_timestamp"`
}

// Encode writes the record's JSON: ownOffsetJSON's as encoding/json writes it, byte for byte,
// assembled by hand (one is written per partition of every commit).
func (o OwnOffset) Encode() []byte {
	b := make([]byte, 0, 112+len(o.Metadata))
	b = append(b, `{"version":1,"offset":`...)
	b = strconv.AppendInt(b, o.Offset, 10)
	b = append(b, `,"leader_epoch":`...)
	b = strconv.AppendInt(b, int64(o.LeaderEpoch), 10)
	b = append(b, `,"metadata":`...)
	b = appendMarshaledString(b, o.Metadata)
	b = append(b, `,"commit_timestamp":"`...)
	b = strconv.AppendInt(b, o.CommittedMs, 10)
	return append(b, `"}`...)
}

// appendMarshaledString appends s as json.Marshal writes a string (HTML characters escaped,
// unlike appendJSONString): quoted as it is when it holds only printable ASCII that needs no
// escape, else by json.Marshal.
func appendMarshaledString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// ParseOwnOffset reads one bridge offset record. Errors wrap ErrMalformed.
func ParseOwnOffset(data []byte) (OwnOffset, error) {
	if _, err := decodeObject(data); err != nil {
		return OwnOffset{}, fmt.Errorf("offset record: %w", err)
	}
	var j ownOffsetJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return OwnOffset{}, fmt.Errorf("%w: offset record: %v", ErrMalformed, err)
	}
	if j.Version < 1 {
		return OwnOffset{}, fmt.Errorf("%w: offset record version %d", ErrMalformed, j.Version)
	}
	o := OwnOffset{Offset: j.Offset, LeaderEpoch: j.LeaderEpoch, Metadata: j.Metadata}
	if j.Committed != "" {
		ms, err := strconv.ParseInt(j.Committed, 10, 64)
		if err != nil {
			return OwnOffset{}, fmt.Errorf("%w: offset record commit_timestamp %q", ErrMalformed, j.Committed)
		}
		o.CommittedMs = ms
	}
	return o, nil
}

// OffsetPair is one partition's two committed-offset znodes as read: the 0.8 one
// (/consumers/<g>/offsets/<t>/<p>, which 0.8 consumers and tools share) and the bridge's own
// record (OwnOffsetPath). HasZK and HasOwn say that the znode is there and its data parsed;
// the zxids are the znodes' Mzxid, ZooKeeper's order of their last writes.
type OffsetPair struct {
	HasZK  bool
	ZK     int64
	ZKZxid int64

	HasOwn  bool
	Own     OwnOffset
	OwnZxid int64
}

// FetchedOffset is a partition's committed offset as OffsetFetch answers it.
type FetchedOffset struct {
	Offset      int64
	LeaderEpoch int32 // -1: unknown
	Metadata    string
}

// Fetch decides what a group's consumers committed for the partition (ok false: nothing):
// the one rule the bridge's OffsetFetch, `migrate` and the CLI apply (DESIGN §1).
//
//   - Not finalized: the 0.8 znode is the truth, since 0.8 consumers write it alone; the
//     bridge's record adds its leader epoch and metadata when it holds the same offset.
//   - Finalized (finalZxid: the mode record's Mzxid, when the group was finalized, since
//     finalized is terminal; 0 when unknown): since finalization only the bridge's records are
//     written, and before it both were, except for the offsets legacy or zk members committed
//     to the 0.8 znode alone. So the later write of the two wins, in ZooKeeper's order (the two
//     znodes of one bridge commit share their Mzxid), except that a 0.8 write after
//     finalization never overrides a record of the bridge: a 0.8 consumer left running cannot
//     move a finalized group's offsets. Where only the 0.8 znode exists it is the only offset
//     there is, whenever it was written.
func (p OffsetPair) Fetch(finalized bool, finalZxid int64) (FetchedOffset, bool) {
	if !finalized {
		if !p.HasZK {
			return FetchedOffset{}, false
		}
		o := FetchedOffset{Offset: p.ZK, LeaderEpoch: -1}
		if p.HasOwn && p.Own.Offset == p.ZK {
			o.LeaderEpoch, o.Metadata = p.Own.LeaderEpoch, p.Own.Metadata
		}
		return o, true
	}
	zkWins := p.HasZK && (!p.HasOwn ||
		(p.ZKZxid > p.OwnZxid && (finalZxid == 0 || p.ZKZxid < finalZxid)))
	switch {
	case zkWins:
		return FetchedOffset{Offset: p.ZK, LeaderEpoch: -1}, true
	case p.HasOwn:
		return FetchedOffset{Offset: p.Own.Offset, LeaderEpoch: p.Own.LeaderEpoch, Metadata: p.Own.Metadata}, true
	}
	return FetchedOffset{}, false
}
