package newproto

// ApiVersions, key 18: versions 0-4.
//
// Version notes:
//   - v0: error code and, per api key we serve, its min and max version.
//   - v1: ThrottleMillis (always 0 here: the bridge does not throttle).
//   - v2: no change in the body; clients apply throttles after the
//     response (KIP-219).
//   - v3: flexible versions (KIP-482); the request carries
//     ClientSoftwareName and ClientSoftwareVersion (KIP-511), which Kafka
//     validates and so do we (INVALID_REQUEST when they do not match
//     [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?); tagged response
//     fields for features (KIP-584) and ZkMigrationReady (KIP-866).
//   - v4: no change in the body; the client accepts a SupportedFeatures
//     MinVersion of 0 (KAFKA-17011).
//   - v5 (request ClusterId/NodeId): not served.
//
// Not implemented: features. SupportedFeatures and FinalizedFeatures are
// empty and FinalizedFeaturesEpoch is -1, as on a broker with no feature
// flags (ZooKeeper-era clusters have none).
//
// Unsupported versions (KIP-511): a client sends its highest ApiVersions
// version before it knows the broker. For a version above ours the body is
// not parsed (frame.go) and the answer is UNSUPPORTED_VERSION in the v0
// format, header v0, with our table, so the client retries at our max.
// Kafka puts only its ApiVersions range in that list; we list the whole
// table, a superset every client accepts (they read the key-18 entry).
//
// The table below is the single statement of which api keys and versions
// newproto serves: each API file registers its range with regKey in an
// init function (kfake's pattern), and both this response and the router's
// version check are derived from it.

import (
	"context"
	"fmt"
	"regexp"
	"sort"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func init() { regKey(kmsg.ApiVersions, 0, 4) }

// versionRange is an inclusive range of api versions.
type versionRange struct{ min, max int16 }

// supported maps each api key we serve to its version range.
var supported = map[int16]versionRange{}

// regKey declares that newproto serves key at versions min through max. It
// panics on a key declared twice or a range the codec cannot decode: both
// are programming errors that must fail at start-up, not at a client.
func regKey(key kmsg.Key, minVersion, maxVersion int16) {
	k := int16(key)
	if _, dup := supported[k]; dup {
		panic(fmt.Sprintf("newproto: api key %d (%s) registered twice", k, kmsg.NameForKey(k)))
	}
	req := kmsg.RequestForKey(k)
	if req == nil || minVersion < 0 || minVersion > maxVersion || maxVersion > req.MaxVersion() {
		panic(fmt.Sprintf("newproto: api key %d (%s) v%d-v%d is outside what kmsg decodes", k, kmsg.NameForKey(k), minVersion, maxVersion))
	}
	supported[k] = versionRange{minVersion, maxVersion}
}

// supports reports whether we serve key at version.
func supports(key, version int16) bool {
	r, ok := supported[key]
	return ok && r.min <= version && version <= r.max
}

// apiVersionsMax is the highest ApiVersions version we parse.
func apiVersionsMax() int16 { return supported[int16(kmsg.ApiVersions)].max }

// apiKeys returns the table in ApiVersions form, sorted by key.
func apiKeys() []kmsg.ApiVersionsResponseApiKey {
	keys := make([]kmsg.ApiVersionsResponseApiKey, 0, len(supported))
	for k, r := range supported {
		e := kmsg.NewApiVersionsResponseApiKey()
		e.ApiKey, e.MinVersion, e.MaxVersion = k, r.min, r.max
		keys = append(keys, e)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].ApiKey < keys[j].ApiKey })
	return keys
}

// softwarePattern is Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN.
var softwarePattern = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

func (r *router) apiVersions(ctx context.Context, m *kmsg.ApiVersionsRequest) kmsg.Response {
	resp := kmsg.NewPtrApiVersionsResponse()
	if !supports(m.Key(), m.Version) {
		resp.SetVersion(0)
		resp.ErrorCode = int16(ErrUnsupportedVersion)
		resp.ApiKeys = r.advertised(ctx)
		return resp
	}
	resp.SetVersion(m.Version)
	if m.Version >= 3 && (!softwarePattern.MatchString(m.ClientSoftwareName) || !softwarePattern.MatchString(m.ClientSoftwareVersion)) {
		// Kafka answers INVALID_REQUEST with no keys (KafkaApis
		// handleApiVersionsRequest).
		resp.ErrorCode = int16(ErrInvalidRequest)
		return resp
	}
	resp.ApiKeys = r.advertised(ctx)
	return resp
}

// advertised is the table ApiVersions answers: every key we serve with its
// range, except that OffsetFetch is advertised up to v10 (topics by id)
// only while every topic of the cluster has an id. A client offered v10
// names topics by id: franz-go (its consumer and its admin requests alike)
// takes the ids from Metadata, and a topic Metadata gave no id could not
// be named at all. Otherwise v8, which names topics. Versions 9 and 10 are
// served whatever is advertised, for a client that negotiated them before
// a topic without an id appeared.
func (r *router) advertised(ctx context.Context) []kmsg.ApiVersionsResponseApiKey {
	keys := apiKeys()
	if r.allTopicsHaveIDs(ctx) {
		return keys
	}
	for i := range keys {
		if keys[i].ApiKey == int16(kmsg.OffsetFetch) {
			keys[i].MaxVersion = min(keys[i].MaxVersion, offsetFetchByName)
		}
	}
	return keys
}

// offsetFetchByName is the last OffsetFetch version advertised to clients
// of a cluster whose topics are not all named by id.
const offsetFetchByName = 8

func (r *router) allTopicsHaveIDs(ctx context.Context) bool {
	src, ok := r.cluster.(TopicIDs)
	if !ok || r.cluster == nil {
		return false
	}
	topics, err := r.cluster.Topics(ctx)
	if err != nil || len(topics) == 0 {
		return false
	}
	ids, err := src.TopicIDs(ctx)
	if err != nil {
		return false
	}
	for name := range topics {
		if ids[name] == ([16]byte{}) {
			return false
		}
	}
	return true
}
