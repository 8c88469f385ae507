package newproto_test

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/zkbridge/zkbridge/kafkatest"
	"github.com/zkbridge/zkbridge/newproto"
)

// Requests outside the table are answered with their own response type
// carrying UNSUPPORTED_VERSION where the response has error fields
// (unsupported.go), and the connection stays usable.
func TestUnsupportedAnswered(t *testing.T) {
	const unsupported = int16(newproto.ErrUnsupportedVersion)
	produce := func(v int16) kmsg.Request {
		r := kmsg.NewPtrProduceRequest()
		r.SetVersion(v)
		r.Acks = -1
		t := kmsg.NewProduceRequestTopic()
		t.Topic = "orders"
		p := kmsg.NewProduceRequestTopicPartition()
		p.Partition = 3
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return r
	}
	fetch := func(v int16) kmsg.Request {
		r := kmsg.NewPtrFetchRequest()
		r.SetVersion(v)
		t := kmsg.NewFetchRequestTopic()
		t.Topic = "orders"
		p := kmsg.NewFetchRequestTopicPartition()
		p.Partition = 1
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return r
	}
	listOffsets := func(v int16) kmsg.Request {
		r := kmsg.NewPtrListOffsetsRequest()
		r.SetVersion(v)
		t := kmsg.NewListOffsetsRequestTopic()
		t.Topic = "orders"
		p := kmsg.NewListOffsetsRequestTopicPartition()
		p.Partition = 0
		t.Partitions = append(t.Partitions, p)
		r.Topics = append(r.Topics, t)
		return r
	}
	withVersion := func(r kmsg.Request, v int16) kmsg.Request { r.SetVersion(v); return r }

	for _, tc := range []struct {
		req   kmsg.Request
		codes func(kmsg.Response) []int16
	}{
		{produce(3), func(r kmsg.Response) []int16 {
			t := r.(*kmsg.ProduceResponse).Topics[0]
			if t.Topic != "orders" || t.Partitions[0].Partition != 3 {
				return []int16{-999} // the request's items are not mirrored
			}
			return []int16{t.Partitions[0].ErrorCode}
		}},
		{produce(9), func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode}
		}},
		{fetch(4), func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode}
		}},
		{fetch(12), func(r kmsg.Response) []int16 {
			f := r.(*kmsg.FetchResponse)
			return []int16{f.ErrorCode, f.Topics[0].Partitions[0].ErrorCode}
		}},
		{listOffsets(1), func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0].ErrorCode}
		}},
		// Top-level error codes, found by the generic path.
		{withVersion(kmsg.NewPtrDescribeClusterRequest(), 0), func(r kmsg.Response) []int16 { return []int16{r.(*kmsg.DescribeClusterResponse).ErrorCode} }},
		{withVersion(kmsg.NewPtrInitProducerIDRequest(), 2), func(r kmsg.Response) []int16 { return []int16{r.(*kmsg.InitProducerIDResponse).ErrorCode} }},
		// Served keys at versions above our range.
		{withVersion(kmsg.NewPtrMetadataRequest(), 13), func(r kmsg.Response) []int16 { return []int16{r.(*kmsg.MetadataResponse).ErrorCode} }},
		{withVersion(&kmsg.DescribeGroupsRequest{Groups: []string{"g"}}, 6), func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.DescribeGroupsResponse).Groups[0].ErrorCode}
		}},
		{withVersion(&kmsg.FindCoordinatorRequest{CoordinatorKeys: []string{"g"}}, 6), func(r kmsg.Response) []int16 {
			return []int16{r.(*kmsg.FindCoordinatorResponse).Coordinators[0].ErrorCode}
		}},
		{withVersion(kmsg.NewPtrListGroupsRequest(), 5), func(r kmsg.Response) []int16 { return []int16{r.(*kmsg.ListGroupsResponse).ErrorCode} }},
	} {
		name := fmt.Sprintf("%s v%d", kmsg.NameForKey(tc.req.Key()), tc.req.GetVersion())
		t.Run(name, func(t *testing.T) {
			ts := startServer(t, newproto.Config{})
			c := kafkatest.Dial(t, ts.addr)
			if codes := tc.codes(c.RoundTrip(tc.req)); !allEqual(codes, unsupported) {
				t.Errorf("codes %v, want all UNSUPPORTED_VERSION", codes)
			}
			kafkatest.CheckAlive(t, c)
		})
	}
}

// What cannot be answered closes the connection, and only it.
func TestUnsupportedClosed(t *testing.T) {
	rawFrame := func(key, version int16) []byte {
		f := binary.BigEndian.AppendUint16(nil, uint16(key))
		f = binary.BigEndian.AppendUint16(f, uint16(version))
		f = binary.BigEndian.AppendUint32(f, 1)
		f = append(f, 0, 0) // empty client id
		f = append(f, 0, 0, 0, 0)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(f))), f...)
	}
	fmtr := kmsg.NewRequestFormatter()
	encode := func(r kmsg.Request, v int16) []byte {
		r.SetVersion(v)
		return fmtr.AppendRequest(nil, r, 1)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
	}{
		{"unknown api key", rawFrame(9999, 0)},
		{"negative api key", rawFrame(-1, 0)},
		{"version the codec does not know", rawFrame(int16(kmsg.JoinGroup), 10)},
		{"negative version", rawFrame(int16(kmsg.Metadata), -1)},
		{"produce acks=0 expects no response", encode(&kmsg.ProduceRequest{Acks: 0, TimeoutMillis: 1}, 7)},
		{"fetch v4 with no partitions has no error field", encode(kmsg.NewPtrFetchRequest(), 4)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := startServer(t, newproto.Config{})
			other := kafkatest.Dial(t, ts.addr)
			c := kafkatest.Dial(t, ts.addr)
			c.Write(tc.frame)
			c.ExpectClosed()
			kafkatest.CheckAlive(t, other)
		})
	}
}
