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
	}
	for _, reason := range []string{rejectSize, rejectHeader, rejectAPIKey, rejectVersion, rejectBody} {
		m.framesRejected.WithLabelValues(reason) // export zeros
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.errors, m.connsOpen, m.connsAccepted, m.framesRejected} {
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
	k, name := strconv.Itoa(int(key)), kmsg.NameForKey(key)
	if err != nil {
		m.errors.WithLabelValues(k, name, errClosed).Inc()
		return
	}
	if resp == nil {
		return
	}
	seen := map[int16]bool{}
	collectErrorCodes(reflect.ValueOf(resp), seen)
	for code := range seen {
		m.errors.WithLabelValues(k, name, ErrorCode(code).Name()).Inc()
	}
}

// collectErrorCodes adds every non-zero int16 field named ErrorCode in v,
// at any depth, to seen. kmsg responses name their error fields ErrorCode
// at every level, so this counts top-level and per-item errors alike.
func collectErrorCodes(v reflect.Value, seen map[int16]bool) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			collectErrorCodes(v.Elem(), seen)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := v.Field(i)
			if t.Field(i).Name == "ErrorCode" && f.Kind() == reflect.Int16 {
				if c := f.Int(); c != 0 {
					seen[int16(c)] = true
				}
				continue
			}
			if t.Field(i).IsExported() {
				collectErrorCodes(f, seen)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // bytes: records, metadata
		}
		for i := range v.Len() {
			collectErrorCodes(v.Index(i), seen)
		}
	}
}
