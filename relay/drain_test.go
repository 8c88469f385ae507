package relay

import (
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// refuseFetch answers a full fetch NOT_LEADER_OR_FOLLOWER for every partition it names, keeping
// the client's session id, and an incremental one FETCH_SESSION_ID_NOT_FOUND (it may name none
// of the session's partitions), at every Fetch version the relay lets clients use.
func TestRefuseFetch(t *testing.T) {
	ceiling, _ := relayCeiling(int16(kmsg.Fetch))
	for v := int16(4); v <= ceiling; v++ {
		for _, session := range []struct{ id, epoch int32 }{{0, -1}, {0, 0}, {42, 0}, {42, 3}} {
			req := kmsg.NewPtrFetchRequest()
			req.SetVersion(v)
			req.SessionID, req.SessionEpoch = session.id, session.epoch
			rt := kmsg.NewFetchRequestTopic()
			rt.Topic, rt.TopicID = "orders", [16]byte{1, 2, 3}
			for _, p := range []int32{0, 4} {
				rp := kmsg.NewFetchRequestTopicPartition()
				rp.Partition = p
				rt.Partitions = append(rt.Partitions, rp)
			}
			req.Topics = append(req.Topics, rt)
			frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("c")).AppendRequest(nil, req, 77)[4:]

			raw, full, err := refuseFetch(frame)
			if err != nil {
				t.Fatalf("v%d: %v", v, err)
			}
			if responseCorrelationID(raw) != 77 || int(binary.BigEndian.Uint32(raw)) != len(raw)-4 {
				t.Fatalf("v%d: correlation id %d, size prefix of %d bytes", v, responseCorrelationID(raw), len(raw)-4)
			}
			body, err := responseBody(raw, int16(kmsg.Fetch), v)
			if err != nil {
				t.Fatal(err)
			}
			resp := kmsg.NewPtrFetchResponse()
			resp.SetVersion(v)
			if err := resp.ReadFrom(body); err != nil {
				t.Fatalf("v%d: %v", v, err)
			}
			incremental := v >= 7 && session.id > 0 && session.epoch > 0
			if full == incremental {
				t.Errorf("v%d session %v: full %v", v, session, full)
			}
			if incremental {
				if resp.ErrorCode != kerr.FetchSessionIDNotFound.Code || len(resp.Topics) != 0 {
					t.Errorf("v%d incremental: error %d, %d topics", v, resp.ErrorCode, len(resp.Topics))
				}
				continue
			}
			if resp.ErrorCode != 0 || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
				t.Fatalf("v%d session %v: error %d, topics %+v", v, session, resp.ErrorCode, resp.Topics)
			}
			if v >= 7 && resp.SessionID != max(session.id, 0) {
				t.Errorf("v%d: session id %d, want %d", v, resp.SessionID, session.id)
			}
			if got := resp.Topics[0]; (v < 13 && got.Topic != "orders") || (v >= 13 && got.TopicID != rt.TopicID) {
				t.Errorf("v%d: topic %q %v", v, got.Topic, got.TopicID)
			}
			for i, p := range resp.Topics[0].Partitions {
				if p.Partition != rt.Partitions[i].Partition || p.ErrorCode != kerr.NotLeaderForPartition.Code || p.HighWatermark != -1 {
					t.Errorf("v%d: partition %+v", v, p)
				}
			}
		}
	}
}

// refuseProduce answers every partition a Produce names NOT_LEADER_OR_FOLLOWER, nothing
// appended (base offset -1), at every Produce version the relay lets clients use.
func TestRefuseProduce(t *testing.T) {
	ceiling, _ := relayCeiling(int16(kmsg.Produce))
	for v := int16(3); v <= ceiling; v++ {
		req := kmsg.NewPtrProduceRequest()
		req.SetVersion(v)
		req.Acks, req.TimeoutMillis = -1, 1000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic, rt.TopicID = "orders", [16]byte{1, 2, 3}
		for _, p := range []int32{0, 4} {
			rp := kmsg.NewProduceRequestTopicPartition()
			rp.Partition = p
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
		frame := kmsg.NewRequestFormatter(kmsg.FormatterClientID("c")).AppendRequest(nil, req, 78)[4:]

		raw, err := refuseProduce(frame)
		if err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if responseCorrelationID(raw) != 78 || int(binary.BigEndian.Uint32(raw)) != len(raw)-4 {
			t.Fatalf("v%d: correlation id %d, size prefix of %d bytes", v, responseCorrelationID(raw), len(raw)-4)
		}
		body, err := responseBody(raw, int16(kmsg.Produce), v)
		if err != nil {
			t.Fatal(err)
		}
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(v)
		if err := resp.ReadFrom(body); err != nil {
			t.Fatalf("v%d: %v", v, err)
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 2 {
			t.Fatalf("v%d: topics %+v", v, resp.Topics)
		}
		if got := resp.Topics[0]; (v < 13 && got.Topic != "orders") || (v >= 13 && got.TopicID != rt.TopicID) {
			t.Errorf("v%d: topic %q %v", v, got.Topic, got.TopicID)
		}
		for i, p := range resp.Topics[0].Partitions {
			if p.Partition != rt.Partitions[i].Partition || p.ErrorCode != kerr.NotLeaderForPartition.Code || p.BaseOffset != -1 {
				t.Errorf("v%d: partition %+v", v, p)
			}
		}
	}
}

// A Produce that cannot be decoded is not answered: the connection closes.
func TestRefuseProduceBadFrame(t *testing.T) {
	if _, err := refuseProduce([]byte{0, 0, 0, 9, 0, 0, 0, 1}); err == nil {
		t.Fatal("a truncated Produce frame was answered")
	}
}
