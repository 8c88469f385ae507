package bridge_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/bridge"
	"github.com/zkbridge/zkbridge/zkstate/zktest"
)

// FuzzKafkaListener is issue 3's fuzz target ("A fuzz target feeds arbitrary frames to the
// connection handler: no panic, the listener keeps serving") and DESIGN.md §5 ("Both decoders
// reject oversize frames before allocating, never panic, and close only the offending
// connection"), end to end: every input goes, as raw bytes, down a fresh connection to the
// Kafka listener of one real bridge on a real ZooKeeper (started once per fuzzing process),
// whose answers are read and dropped; then a fresh ApiVersions round trip must succeed. A panic
// anywhere in the bridge (decoder, router, group actors, ZooKeeper writes) ends the process
// and fails the input.
//
// The seeds are valid frames built with kmsg (JoinGroup, SyncGroup, OffsetCommit and the other
// group APIs, non-flexible and flexible versions) and broken ones (oversize and negative
// lengths, an unknown api key, a version past kmsg's schemas, a truncated body), so the
// mutator starts from requests that reach the group engine and the ZooKeeper writes.
//
//	go test -run '^$' -fuzz FuzzKafkaListener -fuzztime 30s ./bridge/
func FuzzKafkaListener(f *testing.F) {
	connect := zktest.Connect(f)
	loadTopics(f, zktest.OpenStore(f, connect), map[string]int32{"orders": 3})
	b := startBridgeTB(f, connect, func(c *bridge.Config) {
		// No initial rebalance delay: a fuzzed JoinGroup is answered at once instead of being
		// parked for the delay, which keeps the inputs fast. Parked requests still happen (a
		// join into a group with members waits for them), bounded by the read deadline below.
		c.Group.InitialRebalanceDelay = 0
		c.DrainTimeout = 100 * time.Millisecond
		// The fuzz target may not log through f (testing forbids f.Log inside it), and every
		// garbled input is a logged warning: nothing to read here. A panic still shows.
		c.Logger = zerolog.Nop()
	})
	addr := b.Addr().String()

	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := c.Write(data); err == nil {
			// The bridge sees the end of the input, answers what it read and closes (or
			// closes at once on a garbled frame); a request parked in a group hits the deadline.
			_ = c.(*net.TCPConn).CloseWrite()
			_, _ = io.Copy(io.Discard, c)
		}
		c.Close()

		// The listener keeps serving: a fresh ApiVersions (v3, flexible, kgo's first request).
		if err := apiVersionsRoundTrip(addr); err != nil {
			t.Fatalf("after %d bytes of input: %v", len(data), err)
		}
	})
}

// apiVersionsRoundTrip asks ApiVersions v3 on a fresh connection and checks that the group
// APIs are in the answer.
func apiVersionsRoundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	w := &wireConn{c: c, br: bufio.NewReader(c), f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz-check"))}
	req := kmsg.NewPtrApiVersionsRequest()
	req.SetVersion(3)
	req.ClientSoftwareName, req.ClientSoftwareVersion = "fuzz", "1"
	resp, err := w.roundTrip(req)
	if err != nil {
		return err
	}
	av := resp.(*kmsg.ApiVersionsResponse)
	if av.ErrorCode != 0 {
		return errors.New("ApiVersions answered an error")
	}
	for _, k := range av.ApiKeys {
		if k.ApiKey == 11 { // JoinGroup
			return nil
		}
	}
	return errors.New("ApiVersions without JoinGroup")
}

// fuzzSeeds are the seed inputs: valid frames of the group APIs and broken frames.
func fuzzSeeds() [][]byte {
	rf := kmsg.NewRequestFormatter(kmsg.FormatterClientID("fuzz seed/with space@host"))
	frame := func(req kmsg.Request, version int16) []byte {
		req.SetVersion(version)
		return rf.AppendRequest(nil, req, 1)
	}
	meta := subscription(0, "orders")
	join := func(version int16, member string, instance *string) []byte {
		r := kmsg.NewPtrJoinGroupRequest()
		r.Group, r.MemberID, r.InstanceID = "fuzz", member, instance
		r.SessionTimeoutMillis, r.RebalanceTimeoutMillis = 500, 200
		r.ProtocolType = "consumer"
		p := kmsg.NewJoinGroupRequestProtocol()
		p.Name, p.Metadata = "range", meta
		r.Protocols = append(r.Protocols, p)
		return frame(r, version)
	}
	sync := func(version int16, member string, instance *string) []byte {
		r := kmsg.NewPtrSyncGroupRequest()
		r.Group, r.MemberID, r.InstanceID, r.Generation = "fuzz", member, instance, 1
		r.ProtocolType, r.Protocol = kmsg.StringPtr("consumer"), kmsg.StringPtr("range")
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID, a.MemberAssignment = member, assignment("orders", 0, 1, 2)
		r.GroupAssignment = append(r.GroupAssignment, a)
		return frame(r, version)
	}
	commit := func(version int16, generation int32) []byte {
		r := kmsg.NewPtrOffsetCommitRequest()
		r.Group, r.Generation, r.RetentionTimeMillis = "fuzz-commits", generation, -1
		t := kmsg.NewOffsetCommitRequestTopic()
		t.Topic = "orders"
		for p := range int32(3) {
			pp := kmsg.NewOffsetCommitRequestTopicPartition()
			pp.Partition, pp.Offset, pp.LeaderEpoch, pp.Metadata = p, int64(10+p), -1, kmsg.StringPtr("m")
			t.Partitions = append(t.Partitions, pp)
		}
		r.Topics = append(r.Topics, t)
		return frame(r, version)
	}
	static := kmsg.StringPtr("fuzz/static 1@x")
	seeds := [][]byte{
		join(0, "", nil),
		join(5, "", static),
		join(9, "", nil),
		join(9, "fuzz-member", nil),
		sync(0, "fuzz-member", nil),
		sync(3, "fuzz/static 1@x-0", static),
		sync(5, "fuzz-member", nil),
		commit(2, -1),
		commit(8, -1),
		commit(8, 1),
	}
	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation, hb.InstanceID = "fuzz", "fuzz-member", 1, static
	seeds = append(seeds, frame(hb, 4))
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.Group = "fuzz"
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID, lm.InstanceID = "fuzz-member", static
	leave.Members = append(leave.Members, lm)
	seeds = append(seeds, frame(leave, 5))
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fg := kmsg.NewOffsetFetchRequestGroup()
	fg.Group = "fuzz-commits"
	fetch.Groups = append(fetch.Groups, fg)
	seeds = append(seeds, frame(fetch, 8))
	dg := kmsg.NewPtrDescribeGroupsRequest()
	dg.Groups = []string{"fuzz", "fuzz-commits"}
	seeds = append(seeds, frame(dg, 5))
	seeds = append(seeds, frame(kmsg.NewPtrListGroupsRequest(), 4))
	del := kmsg.NewPtrDeleteGroupsRequest()
	del.Groups = []string{"fuzz-commits"}
	seeds = append(seeds, frame(del, 2))
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKeys = []string{"fuzz", "fuzz-commits"}
	seeds = append(seeds, frame(fc, 4))
	md := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr("orders")
	md.Topics = append(md.Topics, mt)
	seeds = append(seeds, frame(md, 12))
	av := kmsg.NewPtrApiVersionsRequest()
	seeds = append(seeds, frame(av, 99)) // past our table: UNSUPPORTED_VERSION and the table (KIP-511)

	// Two requests in one input, pipelined.
	seeds = append(seeds, append(join(9, "", nil), commit(8, -1)...))
	// Broken frames: a length far past any limit, a negative one, zero, an unknown api key, a
	// version past kmsg's schemas, and a body cut short.
	oversize := binary.BigEndian.AppendUint32(nil, 0x7fffffff)
	seeds = append(seeds, append(oversize, 0, 11, 0, 9), []byte{0xff, 0xff, 0xff, 0xf0, 0, 11}, []byte{0, 0, 0, 0})
	unknownKey := frame(kmsg.NewPtrHeartbeatRequest(), 0)
	binary.BigEndian.PutUint16(unknownKey[4:], 999)
	seeds = append(seeds, unknownKey)
	future := frame(kmsg.NewPtrHeartbeatRequest(), 0)
	binary.BigEndian.PutUint16(future[6:], 77)
	seeds = append(seeds, future)
	cut := join(9, "", nil)
	seeds = append(seeds, cut[:len(cut)/2])
	return seeds
}
