// Package zkconsumer is a faithful Go reimplementation of the rebalance of Kafka 0.8.2's
// high-level consumer, kafka.consumer.ZookeeperConsumerConnector: a "zk" member in the sense of
// DESIGN.md §1, which decides its own partitions through ZooKeeper. It stands in for unmodified
// 0.8 consumers in tests and in the demo, so it does what the real program does, quirks
// included, rather than what would be sensible. Nothing is fetched from brokers: the fetchers
// are replaced by the callbacks of Handler.
//
// # Sources
//
// Comments cite the Kafka source by file and line at the tag 0.8.2.2 of apache/kafka (the
// consumer connector is byte-identical in 0.8.2.0, 0.8.2.1 and 0.8.2.2):
//
//	ZCC      core/src/main/scala/kafka/consumer/ZookeeperConsumerConnector.scala
//	ZkUtils  core/src/main/scala/kafka/utils/ZkUtils.scala
//	PA       core/src/main/scala/kafka/consumer/PartitionAssignor.scala
//	TC       core/src/main/scala/kafka/consumer/TopicCount.scala
//	CC       core/src/main/scala/kafka/consumer/ConsumerConfig.scala
//	CFT      core/src/main/scala/kafka/consumer/ConsumerFetcherThread.scala
//	AFT      core/src/main/scala/kafka/server/AbstractFetcherThread.scala
//	CI       core/src/main/scala/kafka/consumer/ConsumerIterator.scala
//
// and the ZooKeeper client Kafka 0.8.2 ships with (build.gradle:208, com.101tec:zkclient:0.3),
// sgroschupf/zkclient at tag 0.3.0:
//
//	ZkClient src/main/java/org/I0Itec/zkclient/ZkClient.java
//
// The code is a reimplementation from reading those files, not a translation of them.
//
// # What a Consumer does
//
// New connects to ZooKeeper (ZCC:126, connectZk) and starts the auto-committer (ZCC:130-138).
// Run is createMessageStreams (ZCC:145-243): it registers the consumer under
// /consumers/<group>/ids/<consumerId> as an ephemeral znode in the exact 0.8.2 format
// (ZCC:248-257), subscribes to the children of that directory and to the data of
// /brokers/topics/<t> of every subscribed topic (ZCC:893-902), and rebalances once
// (ZCC:905). After that every event rebalances (ZCC:535-571); a rebalance is
// syncedRebalance (ZCC:596-634): up to rebalance.max.retries attempts, each of which
//
//  1. reads the brokers (ZCC:607, 639); with none it only watches /brokers/ids and reports
//     success without touching anything (ZCC:640-647);
//  2. stops the fetchers — Handler.OnRevoke — and, when auto-commit is on, commits the consumed
//     offsets to /consumers/<group>/offsets (ZCC:655, 706-727);
//  3. deletes its own owner znodes (ZCC:657, 573-590);
//  4. re-reads the group's registrations and its topics' partitions and computes its share
//     with range or roundrobin (ZCC:659-660, PA:42-55), the answer every member computes on
//     its own (legacy.Assign on the whole group, filtered to its own threads);
//  5. reads the committed offsets of that share (ZCC:665-667, 382-396);
//  6. creates one ephemeral owner znode per partition holding the thread id (ZCC:684,
//     769-797); if any create meets an existing znode it deletes those it created in this
//     attempt and the attempt fails;
//  7. on success starts the fetchers — Handler.OnAssign with the share and its offsets
//     (ZCC:696-697, 753-767).
//
// A failed attempt stops the fetchers again, commits, and sleeps rebalance.backoff.ms
// (ZCC:618-628). When every attempt failed the rebalance ends with a RebalanceFailedError
// (ConsumerRebalanceFailedException, ZCC:633), reported to Handler.OnError; the consumer keeps
// running, registered but owning nothing, until the next event.
//
// Close is shutdown (ZCC:184-216): it waits for a rebalance in progress, stops the fetchers,
// commits when auto-commit is on, and closes the ZooKeeper session, which is what removes the
// registration and the owner znodes (they are ephemerals of that session).
//
// # Quirks kept on purpose
//
//   - Every event rebalances, whether or not anything that matters changed: there is no
//     "rebalance necessary" check in 0.8.2 (the watcher thread calls syncedRebalance whenever
//     its flag is set, ZCC:538-552, and rebalance never compares with the previous
//     assignment). A data change of /brokers/topics/<t> that only moves replicas rebalances the
//     whole group just like a partition count change. Events arriving during a rebalance
//     coalesce into one more rebalance (one flag, ZCC:522, 566-571).
//   - Owners are released before the group is re-read, so even a rebalance that ends with
//     the same partitions deletes and re-creates every owner znode (ZCC:655-684).
//   - An owner znode that already exists with our own thread id as data is taken as ours,
//     whichever session created it (ZkUtils:235-258, meant for a create retried after a
//     connection loss). The ephemeral owner is never checked.
//   - All owner creates of an attempt are tried even after one conflicted (a Scala map, not a
//     short-circuit, ZCC:771-788); an error other than NodeExists aborts the attempt without
//     deleting what was created (ZCC:786), and those znodes are not in the registry, so the
//     next release does not delete them.
//   - After the last failed attempt the consumer owns nothing but stays registered, so the
//     other members keep counting its threads and leave its share unowned; only the next
//     watched event (an ids or topic change) makes it try again — the deletion of the owner
//     znode it was waiting for is not watched.
//   - A commit failure inside the failure path of syncedRebalance (ZCC:626, outside the try)
//     ends the rebalance with that error, without further attempts.
//   - Shutdown waits for a rebalance in progress, including its remaining attempts and
//     backoffs: the shutdown flag is only checked at the start of syncedRebalance and after
//     reading offsets (ZCC:599, 669).
//   - A consumer id given in the configuration is still prefixed with the group
//     (ZCC:111-123): ConsumerID "c1" in group "g" registers as "g_c1".
//   - Offsets are read before the owner znodes are created (ZCC:667, then 684). If the
//     previous owner commits and releases between the two, the attempt succeeds with the
//     offset it read before that commit (often none, hence the auto.offset.reset sentinel):
//     the new owner starts from a stale position.
//   - A member cut off from ZooKeeper hears nothing: it keeps its partitions and its fetchers
//     (no OnRevoke) while the server expires its session and the others take them over. After
//     the expiry the registry is cleared without stopping the fetchers or committing
//     (resetState, ZCC:592-594, 484); the fetchers stop only at the next rebalance attempt,
//     and offsets consumed since the last commit are consumed again by the next owner. This is
//     the window in which a zk member consumes a partition it no longer owns.
//   - The registration is created with the "ZooKeeper bug" retry of ZkUtils:272-299 and a
//     checker that always says "mine" (ZCC:254-255): a live consumer registered under the same
//     id makes Run wait, retrying every session timeout, for as long as it lives.
//
// # Not modelled
//
// Fetching, the message streams and their queues (ConsumerFetcherManager, KafkaStream):
// OnAssign and OnRevoke stand for starting and stopping them, and Commit for the consumer
// iterator advancing the consumed offset (CI:99, 49). A partition without a committed offset
// is handed to OnAssign with the sentinel of auto.offset.reset (OffsetLatest or
// OffsetEarliest), which the real fetcher resolves against the broker (AFT:177, CFT:53-64).
// Wildcard subscriptions of this consumer (createMessageStreamsByFilter) are not supported,
// though other members' wildcard registrations are read. Offsets storage "kafka" and dual
// commit are not supported: 0.8.2's default, offsets.storage=zookeeper, is what this does.
package zkconsumer
