package newproto

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metrics are the Kafka listener's Prometheus metrics, registered on the
// Registerer in Config (never the global registry).
type metrics struct {
	requests       *prometheus.CounterVec // api_key, api, api_version
	errors         *prometheus.CounterVec // api_key, api, error
	connsOpen      prometheus.Gauge
	connsAccepted  prometheus.Counter
	framesRejected *prometheus.CounterVec // reason
	connsRefused   *prometheus.CounterVec // reason (limits.go)
}

// errClosed is the error label of a request whose handling closed the
// connection instead of answering.
const errClosed = "CONNECTION_CLOSED"

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "requests_total",
			Help: "Kafka requests decoded, by api key and version.",
		}, []string{"api_key", "api", "api_version"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "request_errors_total",
			Help: "Kafka responses carrying an error code (counted once per code per response), " +
				"and requests whose handling closed the connection (error=\"" + errClosed + "\").",
		}, []string{"api_key", "api", "error"}),
		connsOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "connections_open",
			Help: "Kafka client connections currently open.",
		}),
		connsAccepted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "connections_accepted_total",
			Help: "Kafka client connections accepted.",
		}),
		framesRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "frames_rejected_total",
			Help: "Kafka frames that closed their connection, by reason.",
		}, []string{"reason"}),
		connsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "zkbridge", Subsystem: "kafka", Name: "connections_refused_total",
			Help: "Kafka client connections closed at once by a limit, by reason: max_connections, max_connections_per_ip.",
		}, []string{"reason"}),
	}
	for _, reason := range []string{refuseMaxConns, refuseMaxConnsPerIP} {
		m.connsRefused.WithLabelValues(reason)
	}
	for _, reason := range []string{rejectMemory, rejectSize, rejectHeader, rejectAPIKey, rejectVersion, rejectBody, rejectTrailing} {
		m.framesRejected.WithLabelValues(reason) // export zeros
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.connsOpen, m.connsAccepted, m.framesRejected, m.connsRefused} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("newproto: registering metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) request(key, version int16) {
	m.requests.WithLabelValues(strconv.Itoa(int(key)), kmsg.NameForKey(key), strconv.Itoa(int(version))).Inc()
}

// answered counts the errors of one handled request.
func (m *metrics) answered(key int16, resp kmsg.Response, err error) {
	if err != nil {
		m.errors.WithLabelValues(strconv.Itoa(int(key)), kmsg.NameForKey(key), errClosed).Inc()
		return
	}
	if resp == nil {
		return
	}
	var buf [8]int16
	codes := codeSet{codes: buf[:0]}
	errorCodes(resp, &codes)
	if len(codes.codes) == 0 {
		return
	}
	k, name := strconv.Itoa(int(key)), kmsg.NameForKey(key)
	for _, code := range codes.codes {
		m.errors.WithLabelValues(k, name, ErrorCode(code).Name()).Inc()
	}
}

// codeSet is the distinct non-zero error codes of one response, in the
// order found; a response rarely has more than one or two.
type codeSet struct{ codes []int16 }

func (s *codeSet) add(c int16) {
	if c == 0 {
		return
	}
	for _, x := range s.codes {
		if x == c {
			return
		}
	}
	s.codes = append(s.codes, c)
}

// errorCodes adds every error code of resp to s: every field named
// ErrorCode, at any depth (top-level, per group, topic, partition or
// member). The responses the router builds are walked field by field, in
// the order of their kmsg structs; anything else (the error-shaped answers
// of unsupported.go, a custom Handler's) through reflection. Metadata and
// OffsetCommit responses carry a thousand partitions in a large group, and
// a reflective walk over them was a tenth of the bridge's CPU in a join
// storm. TestErrorCodesMatchReflection checks each case against the
// reflective walk.
func errorCodes(resp kmsg.Response, s *codeSet) {
	if !typedErrorCodes(resp, s) {
		collectErrorCodes(reflect.ValueOf(resp), s)
	}
}

// typedErrorCodes is errorCodes for the response types of the keys in the
// ApiVersions table; it reports false, having added nothing, for others.
func typedErrorCodes(resp kmsg.Response, s *codeSet) bool {
	switch r := resp.(type) {
	case *kmsg.ApiVersionsResponse:
		s.add(r.ErrorCode)
	case *kmsg.MetadataResponse:
		s.add(r.ErrorCode)
		for i := range r.Topics {
			t := &r.Topics[i]
			s.add(t.ErrorCode)
			for j := range t.Partitions {
				s.add(t.Partitions[j].ErrorCode)
			}
		}
	case *kmsg.FindCoordinatorResponse:
		s.add(r.ErrorCode)
		for i := range r.Coordinators {
			s.add(r.Coordinators[i].ErrorCode)
		}
	case *kmsg.JoinGroupResponse:
		s.add(r.ErrorCode)
	case *kmsg.HeartbeatResponse:
		s.add(r.ErrorCode)
	case *kmsg.LeaveGroupResponse:
		s.add(r.ErrorCode)
		for i := range r.Members {
			s.add(r.Members[i].ErrorCode)
		}
	case *kmsg.SyncGroupResponse:
		s.add(r.ErrorCode)
	case *kmsg.OffsetCommitResponse:
		for i := range r.Topics {
			t := &r.Topics[i]
			for j := range t.Partitions {
				s.add(t.Partitions[j].ErrorCode)
			}
		}
	case *kmsg.OffsetFetchResponse:
		for i := range r.Topics {
			t := &r.Topics[i]
			for j := range t.Partitions {
				s.add(t.Partitions[j].ErrorCode)
			}
		}
		s.add(r.ErrorCode)
		for i := range r.Groups {
			g := &r.Groups[i]
			for j := range g.Topics {
				t := &g.Topics[j]
				for k := range t.Partitions {
					s.add(t.Partitions[k].ErrorCode)
				}
			}
			s.add(g.ErrorCode)
		}
	case *kmsg.DescribeGroupsResponse:
		for i := range r.Groups {
			s.add(r.Groups[i].ErrorCode)
		}
	case *kmsg.ListGroupsResponse:
		s.add(r.ErrorCode)
	case *kmsg.DeleteGroupsResponse:
		for i := range r.Groups {
			s.add(r.Groups[i].ErrorCode)
		}
	case *kmsg.OffsetDeleteResponse:
		s.add(r.ErrorCode)
		for i := range r.Topics {
			for k := range r.Topics[i].Partitions {
				s.add(r.Topics[i].Partitions[k].ErrorCode)
			}
		}
	default:
		return false
	}
	return true
}

// collectErrorCodes adds every non-zero int16 field named ErrorCode in v,
// at any depth, to s. kmsg responses name their error fields ErrorCode
// at every level, so this counts top-level and per-item errors alike.
func collectErrorCodes(v reflect.Value, s *codeSet) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			collectErrorCodes(v.Elem(), s)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := v.Field(i)
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				s.add(int16(f.Int()))
				continue
			}
			if t.Field(i).IsExported() {
				collectErrorCodes(f, s)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes: records, metadata
		}
		for i := range v.Len() {
			collectErrorCodes(v.Index(i), s)
		}
	}
}
