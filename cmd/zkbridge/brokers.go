package main

// The upstream brokers, for the commands that need what only they know: log start and end
// offsets, offsets by time (offsets reset, lag). They are --bootstrap when given, else the
// brokers registered in /brokers/ids of the ZooKeeper the command reads.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/zkstate"
)

// ListOffsets timestamps with a meaning (Kafka's ListOffsetsRequest.EARLIEST/LATEST_TIMESTAMP).
const (
	latestTimestamp   int64 = -1
	earliestTimestamp int64 = -2
)

// errNoBrokers: neither --bootstrap nor /brokers/ids names a broker.
var errNoBrokers = errors.New("no brokers known: give --bootstrap host:port (none registered in /brokers/ids)")

func bootstrapFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "bootstrap", EnvVars: []string{"ZKBRIDGE_BOOTSTRAP"},
			Usage: "the upstream Kafka brokers, host:port[,host:port...] (default: the brokers registered in /brokers/ids)"},
		&cli.DurationFlag{Name: "kafka-timeout", Value: 30 * time.Second, Usage: "give up on the brokers after this long"},
	}
}

// brokerAddrs is --bootstrap, or else every broker registered in /brokers/ids.
func brokerAddrs(ctx context.Context, c *cli.Context, s *zkstate.Store) ([]string, error) {
	var out []string
	for _, b := range strings.Split(c.String("bootstrap"), ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	regs, _, err := s.Brokers(ctx)
	if err != nil {
		return nil, fmt.Errorf("brokers in /brokers/ids: %w", err)
	}
	for _, r := range regs {
		if r.Host != "" && r.Port > 0 {
			out = append(out, net.JoinHostPort(r.Host, strconv.Itoa(int(r.Port))))
			continue
		}
		for _, ep := range r.Endpoints {
			// PLAINTEXT://host:port: the listener every tool of the 0.8 era used.
			if hp, ok := strings.CutPrefix(ep, "PLAINTEXT://"); ok {
				out = append(out, hp)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, errNoBrokers
	}
	return out, nil
}

// brokerClient is a franz-go client of the upstream brokers.
func brokerClient(addrs []string) (*kgo.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ClientID("zkbridge-cli"))
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", strings.Join(addrs, ","), err)
	}
	return cl, nil
}

// topicPartitions asks the brokers which partitions the topics have (nil topics: none).
func topicPartitions(ctx context.Context, cl *kgo.Client, topics []string) (map[string][]int32, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	out := map[string][]int32{}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 || t.Topic == nil {
			continue
		}
		for _, p := range t.Partitions {
			out[*t.Topic] = append(out[*t.Topic], p.Partition)
		}
	}
	return out, nil
}

// listOffsets asks the partitions' leaders for the offset at ts (earliestTimestamp,
// latestTimestamp, or milliseconds: the first offset whose record is at or after it, -1 when
// there is none). A partition the brokers answer with an error is absent, its error in errs.
func listOffsets(ctx context.Context, cl *kgo.Client, tps []zkstate.TopicPartition, ts int64) (map[zkstate.TopicPartition]int64, map[zkstate.TopicPartition]error, error) {
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID = -1
	byTopic := map[string]int{}
	for _, tp := range tps {
		i, ok := byTopic[tp.Topic]
		if !ok {
			i = len(req.Topics)
			byTopic[tp.Topic] = i
			rt := kmsg.NewListOffsetsRequestTopic()
			rt.Topic = tp.Topic
			req.Topics = append(req.Topics, rt)
		}
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp, rp.CurrentLeaderEpoch = tp.Partition, ts, -1
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
	out := map[zkstate.TopicPartition]int64{}
	errs := map[zkstate.TopicPartition]error{}
	if len(tps) == 0 {
		return out, errs, nil
	}
	// kgo splits ListOffsets by partition leader and merges the answers.
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("list offsets: %w", err)
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			tp := zkstate.TopicPartition{Topic: t.Topic, Partition: p.Partition}
			if p.ErrorCode != 0 {
				errs[tp] = fmt.Errorf("list offsets of %s/%d: error code %d", t.Topic, p.Partition, p.ErrorCode)
				continue
			}
			out[tp] = p.Offset
		}
	}
	return out, errs, nil
}

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}
