// Package newproto serves the Kafka group-coordinator APIs on the Kafka
// wire, so that unmodified Kafka clients (franz-go, kafka-go, librdkafka,
// the Java client) can use the bridge as their group coordinator.
//
// The package has two halves:
//
//   - the connection shell (server.go, conn.go, frame.go): a Server that
//     accepts connections, reads size-prefixed frames (rejecting oversize
//     ones before allocating), decodes them with kmsg, hands each request
//     to a Handler on its own goroutine and writes the responses of each
//     connection in request order;
//   - the APIs (the built-in Handler, router.go): one file per api key,
//     named NN_snake_name.go after kfake, each opening with version notes
//     and registering its supported range with regKey. ApiVersions and the
//     version check derive from that one table (18_api_versions.go).
//
// newproto declares what it consumes: a Cluster (brokers and topics, for
// Metadata), a Coordinator (the group APIs) and, to front a real cluster,
// a Relay (relayhook.go), which package relay implements: every request
// the Handler does not answer is handed to it. GroupCoordinator
// (groups.go) is the Coordinator that translates the group APIs into
// events of the pure group engine (bridge/group) and its replies back,
// one file per api key; it consumes Groups, which the bridge implements
// with its per-group actors and ZooKeeper. newproto never imports bridge,
// relay, zkstate or legacy.
//
// Kafka error codes live in errors.go, metrics in metrics.go; requests the
// bridge does not serve are answered as unsupported.go documents.
package newproto
