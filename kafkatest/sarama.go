package kafkatest

import (
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// SaramaConfig is the sarama configuration the tests start from: a producer that waits for
// every replica and picks partitions by hand (Return.Successes, as a SyncProducer needs), and
// short fetch waits and metadata backoffs so that nothing waits on sarama's defaults.
func SaramaConfig(clientID string) *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = clientID
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Consumer.MaxWaitTime = 100 * time.Millisecond
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

// SaramaClient connects a sarama client with cfg to addrs; t.Cleanup closes it.
func SaramaClient(t testing.TB, cfg *sarama.Config, addrs ...string) sarama.Client {
	t.Helper()
	client, err := sarama.NewClient(addrs, cfg)
	if err != nil {
		t.Fatalf("sarama client: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// SaramaProduce sends values to topic with a SyncProducer on client, value i to partition
// partition(i), and fails t on the first error.
func SaramaProduce(t testing.TB, client sarama.Client, topic string, values []string, partition func(i int) int32) {
	t.Helper()
	prod, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range values {
		if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: partition(i), Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatalf("sarama produce %s to %s/%d: %v", v, topic, partition(i), err)
		}
	}
	if err := prod.Close(); err != nil {
		t.Fatal(err)
	}
}
