package newproto

// Requests we do not serve, and error-shaped responses.
//
// What a client gets for a request outside the ApiVersions table:
//
//   - An api key kmsg does not know (no schema): the connection is closed
//     and the frame logged (frame.go). Kafka does the same: its request
//     header parser throws for an unknown key and the socket server closes
//     the connection. There is no response type to answer with.
//   - A known key at a version kmsg cannot decode (above its max, or
//     negative): closed, as Kafka does; without the version's schema the
//     body cannot be read nor the response shaped. ApiVersions is the
//     exception (KIP-511, see 18_api_versions.go).
//   - A known key at a decodable version that we do not serve (an API
//     outside the table, or a version outside its range): answered with
//     that key's own response, at the request's version, with
//     UNSUPPORTED_VERSION (35) in every error field the response has at
//     that version: the top-level error code where there is one, otherwise
//     each requested group, topic or partition. Kafka closes the
//     connection here instead; we answer because a client (and its
//     operator) then sees why, where a closed connection looks like a
//     network fault that clients retry forever. Where the response has no
//     error field at that version, or the request expects no response
//     (Produce with acks=0), the connection is closed.
//
// errorResponse builds those answers; the router also uses it to answer a
// group request with COORDINATOR_NOT_AVAILABLE or a Coordinator's error
// code in the right shape.

import (
	"bytes"
	"fmt"
	"reflect"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// errorAnswer is errorResponse for the router: a request whose response
// cannot carry the error closes the connection.
func (r *router) errorAnswer(req *Request, code ErrorCode, text string) (kmsg.Response, error) {
	resp, ok := errorResponse(req.Msg, code, text)
	if !ok {
		return nil, fmt.Errorf("%s v%d: the response has no field for %s; closing the connection",
			kmsg.NameForKey(req.Msg.Key()), req.Msg.GetVersion(), code.Name())
	}
	return resp, nil
}

// unsupported answers a request outside the ApiVersions table.
func (r *router) unsupported(req *Request) (kmsg.Response, error) {
	if p, ok := req.Msg.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
		// The client waits for no response: an answer would be read
		// as the response to its next request. Closing is the only
		// signal it can get.
		return nil, fmt.Errorf("Produce v%d with acks=0 is not served; closing the connection", p.Version)
	}
	return r.errorAnswer(req, ErrUnsupportedVersion, "")
}

// errorResponse builds the response to req, at req's version, with code
// in every error field the response has at that version. text goes into
// error-message fields where the response has them (empty: null). ok is
// false when the response cannot carry an error.
func errorResponse(req kmsg.Request, code ErrorCode, text string) (resp kmsg.Response, ok bool) {
	resp = kmsg.ResponseForKey(req.Key())
	if resp == nil {
		return nil, false
	}
	v := req.GetVersion()
	resp.SetVersion(v)
	c := int16(code)
	var msg *string
	if text != "" {
		msg = &text
	}

	// Keys whose errors live per item: the response mirrors the request's
	// groups, topics and partitions, each carrying the error.
	if ok, handled := dataErrorResponse(req, resp, c, msg); handled {
		return resp, ok
	}
	if ok, handled := groupErrorResponse(req, resp, c, msg); handled {
		return resp, ok
	}
	return resp, setTopLevelError(resp, c, msg)
}

// dataErrorResponse fills errorResponse's resp for the data-path keys (Produce, Fetch,
// ListOffsets, Metadata, OffsetForLeaderEpoch), whose errors live per topic or partition;
// handled is false for other keys.
func dataErrorResponse(req kmsg.Request, resp kmsg.Response, c int16, msg *string) (ok, handled bool) {
	v := req.GetVersion()
	switch req := req.(type) {
	case *kmsg.ProduceRequest:
		r := resp.(*kmsg.ProduceResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewProduceResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.ErrorMessage = p.Partition, c, msg
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return true, true

	case *kmsg.FetchRequest:
		r := resp.(*kmsg.FetchResponse)
		r.ErrorCode = c // v7+
		r.SessionID = 0
		for _, t := range req.Topics {
			rt := kmsg.NewFetchResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewFetchResponseTopicPartition()
				rp.Partition, rp.ErrorCode, rp.HighWatermark = p.Partition, c, -1
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return v >= 7 || len(r.Topics) > 0, true

	case *kmsg.ListOffsetsRequest:
		r := resp.(*kmsg.ListOffsetsResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewListOffsetsResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewListOffsetsResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, c
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return true, true

	case *kmsg.MetadataRequest:
		r := resp.(*kmsg.MetadataResponse)
		r.ErrorCode = c // v13+
		for _, t := range req.Topics {
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic, rt.TopicID, rt.ErrorCode = t.Topic, t.TopicID, c
			r.Topics = append(r.Topics, rt)
		}
		// A request for all topics has no item to carry the error
		// before v13.
		return v >= 13 || len(r.Topics) > 0, true

	case *kmsg.OffsetForLeaderEpochRequest:
		r := resp.(*kmsg.OffsetForLeaderEpochResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetForLeaderEpochResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, c
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return true, true
	}
	return false, false
}

// groupErrorResponse fills errorResponse's resp for the group keys whose errors live per
// group, topic or partition, or in fields a bare top-level error would leave wrong;
// handled is false for other keys.
func groupErrorResponse(req kmsg.Request, resp kmsg.Response, c int16, msg *string) (ok, handled bool) {
	v := req.GetVersion()
	switch req := req.(type) {
	case *kmsg.OffsetCommitRequest:
		r := resp.(*kmsg.OffsetCommitResponse)
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetCommitResponseTopic()
			rt.Topic, rt.TopicID = t.Topic, t.TopicID
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetCommitResponseTopicPartition()
				rp.Partition, rp.ErrorCode = p.Partition, c
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return true, true

	case *kmsg.OffsetFetchRequest:
		r := resp.(*kmsg.OffsetFetchResponse)
		if v >= 8 {
			for _, g := range req.Groups {
				rg := kmsg.NewOffsetFetchResponseGroup()
				rg.Group, rg.ErrorCode = g.Group, c
				r.Groups = append(r.Groups, rg)
			}
			return true, true
		}
		// v2-v7 have a top-level error and, as Kafka's
		// getErrorResponse, no partitions; v0-v1 only per-partition
		// errors, as Kafka puts a group error into each partition.
		r.ErrorCode = c
		if v >= 2 {
			return true, true
		}
		for _, t := range req.Topics {
			rt := kmsg.NewOffsetFetchResponseTopic()
			rt.Topic = t.Topic
			for _, p := range t.Partitions {
				rp := kmsg.NewOffsetFetchResponseTopicPartition()
				rp.Partition, rp.Offset, rp.ErrorCode = p, -1, c
				rt.Partitions = append(rt.Partitions, rp)
			}
			r.Topics = append(r.Topics, rt)
		}
		return len(r.Topics) > 0, true

	case *kmsg.JoinGroupRequest:
		// Kafka's JoinGroup error result: the member id echoed,
		// generation -1 (UNKNOWN_GENERATION_ID).
		r := resp.(*kmsg.JoinGroupResponse)
		r.ErrorCode, r.Generation, r.MemberID = c, -1, req.MemberID
		return true, true

	case *kmsg.FindCoordinatorRequest:
		r := resp.(*kmsg.FindCoordinatorResponse)
		r.NodeID, r.Port = -1, -1
		if v < 4 {
			r.ErrorCode, r.ErrorMessage = c, msg
			return true, true
		}
		for _, key := range req.CoordinatorKeys {
			rc := kmsg.NewFindCoordinatorResponseCoordinator()
			rc.Key, rc.NodeID, rc.Port, rc.ErrorCode, rc.ErrorMessage = key, -1, -1, c, msg
			r.Coordinators = append(r.Coordinators, rc)
		}
		return true, true

	case *kmsg.DescribeGroupsRequest:
		r := resp.(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDescribeGroupsResponseGroup()
			rg.Group, rg.ErrorCode, rg.ErrorMessage = g, c, msg
			r.Groups = append(r.Groups, rg)
		}
		return true, true

	case *kmsg.DeleteGroupsRequest:
		r := resp.(*kmsg.DeleteGroupsResponse)
		for _, g := range req.Groups {
			rg := kmsg.NewDeleteGroupsResponseGroup()
			rg.Group, rg.ErrorCode, rg.ErrorMessage = g, c, msg
			r.Groups = append(r.Groups, rg)
		}
		return true, true

	}
	return false, false
}

// setTopLevelError sets the response's ErrorCode (and ErrorMessage) field
// and reports whether the code is on the wire at the response's version:
// kmsg structs carry every version's fields, so a field that exists may
// still not be encoded, and re-encoding is the one reliable test.
func setTopLevelError(resp kmsg.Response, code int16, msg *string) bool {
	rv := reflect.ValueOf(resp).Elem()
	f := rv.FieldByName("ErrorCode")
	if !f.IsValid() || f.Kind() != reflect.Int16 {
		return false
	}
	before := resp.AppendTo(nil)
	f.SetInt(int64(code))
	if !bytes.Equal(before, resp.AppendTo(nil)) {
		if m := rv.FieldByName("ErrorMessage"); m.IsValid() && m.Type() == reflect.TypeFor[*string]() {
			m.Set(reflect.ValueOf(msg))
		}
		return true
	}
	return false
}
