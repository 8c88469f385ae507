package main

// Lag in `groups describe`: LOG-END-OFFSET and LAG per partition, as
// kafka-consumer-groups --describe shows them, and a LAG column (each group's total) in
// `groups list`, whenever the brokers are known: --bootstrap, or
// the brokers registered in /brokers/ids when one of them answers. The log end is ListOffsets
// latest (read_uncommitted, as kafka-consumer-groups asks it); LAG is log end minus the
// committed offset, "-" without a commit. Brokers that cannot be reached cost the describe
// nothing but a warning on stderr: the table is printed without the two columns.

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/zkbridge/zkbridge/migrate"
	"github.com/zkbridge/zkbridge/zkstate"
)

// reachTimeout bounds the check that a broker from /brokers/ids answers at all, so that a
// describe on a ZooKeeper whose registered brokers are gone (a test, a demo) stays quick.
const reachTimeout = 500 * time.Millisecond

func addLag(c *cli.Context, e *env, s *zkstate.Store, v *groupView) {
	if len(v.Partitions) == 0 {
		return
	}
	tps := make([]zkstate.TopicPartition, len(v.Partitions))
	for i, p := range v.Partitions {
		tps[i] = zkstate.TopicPartition{Topic: p.Topic, Partition: p.Partition}
	}
	if ends, ok := logEnds(c, e, s, tps); ok {
		fillLag(v.Partitions, ends)
	}
}

// logEnds asks the brokers (--bootstrap, or those of /brokers/ids when one answers) for the
// log end offsets of tps; ok is false, with a warning, when they are unknown or do not answer.
func logEnds(c *cli.Context, e *env, s *zkstate.Store, tps []zkstate.TopicPartition) (map[zkstate.TopicPartition]int64, bool) {
	addrs, ok := lagBrokers(c, e, s)
	if !ok {
		return nil, false
	}
	return logEndsFrom(c, e, addrs, tps)
}

// lagBrokers is --bootstrap, or the brokers of /brokers/ids when one of them answers; ok is
// false, with a warning, when they are unknown or none answers.
func lagBrokers(c *cli.Context, e *env, s *zkstate.Store) ([]string, bool) {
	addrs, err := brokerAddrs(c.Context, c, s)
	if err != nil {
		if c.String("bootstrap") != "" {
			e.log.Warn().Err(err).Msg("no lag: brokers unknown")
		}
		return nil, false
	}
	if c.String("bootstrap") == "" && !anyReachable(c.Context, addrs) {
		e.log.Warn().Strs("brokers", addrs).Msg("no lag: no broker registered in /brokers/ids answers (give --bootstrap)")
		return nil, false
	}
	return addrs, true
}

// logEndsFrom is logEnds from known brokers.
func logEndsFrom(c *cli.Context, e *env, addrs []string, tps []zkstate.TopicPartition) (map[zkstate.TopicPartition]int64, bool) {
	cl, err := brokerClient(addrs)
	if err != nil {
		e.log.Warn().Err(err).Msg("no lag")
		return nil, false
	}
	defer cl.Close()
	ctx, cancel := contextWithTimeout(c.Context, c.Duration("kafka-timeout"))
	defer cancel()
	ends, errs, err := listOffsets(ctx, cl, tps, latestTimestamp)
	if err != nil {
		e.log.Warn().Err(err).Msg("no lag: the brokers did not answer")
		return nil, false
	}
	for _, err := range errs {
		e.log.Warn().Err(err).Msg("no log end offset")
	}
	return ends, true
}

// addListLag fills the LAG column of groups list: each group's total over its committed
// offsets (what OffsetFetch answers: a finalized group's are the bridge's records), from one
// ListOffsets for every group's partitions.
func addListLag(c *cli.Context, e *env, s *zkstate.Store, rows []groupRow) {
	if len(rows) == 0 {
		return
	}
	addrs, ok := lagBrokers(c, e, s)
	if !ok {
		return
	}
	committed := make([][]migrate.Offset, len(rows))
	seen := map[zkstate.TopicPartition]bool{}
	var tps []zkstate.TopicPartition
	for i, r := range rows {
		cur, err := migrate.ReadOffsets(c.Context, s, c.String("root"), r.Group)
		if err != nil {
			e.log.Warn().Err(err).Str("group", r.Group).Msg("no lag for the group: its offsets cannot be read")
			continue
		}
		committed[i] = cur.Offsets
		for _, o := range cur.Offsets {
			if tp := o.TP(); !seen[tp] {
				seen[tp] = true
				tps = append(tps, tp)
			}
		}
	}
	if len(tps) == 0 {
		return
	}
	ends, ok := logEndsFrom(c, e, addrs, tps)
	if !ok {
		return
	}
	for i := range rows {
		rows[i].Lag = groupLag(committed[i], ends)
	}
}

// groupLag is a group's total lag (pure): the sum over its committed offsets of log end minus
// the offset, never below 0 per partition; nil when no partition has both a commit and a log
// end, which the table shows as "-".
func groupLag(offsets []migrate.Offset, ends map[zkstate.TopicPartition]int64) *int64 {
	var total int64
	known := false
	for _, o := range offsets {
		if end, ok := ends[o.TP()]; ok {
			total += max(end-o.Offset, 0)
			known = true
		}
	}
	if !known {
		return nil
	}
	return &total
}

// fillLag sets each partition's log end and lag (pure): lag = log end - committed offset, never
// below 0 (a commit past the log end, after a topic was recreated, is no negative lag).
func fillLag(parts []partitionView, ends map[zkstate.TopicPartition]int64) {
	for i := range parts {
		end, ok := ends[zkstate.TopicPartition{Topic: parts[i].Topic, Partition: parts[i].Partition}]
		if !ok {
			continue
		}
		parts[i].LogEnd = &end
		if parts[i].Offset != nil {
			lag := max(end-*parts[i].Offset, 0)
			parts[i].Lag = &lag
		}
	}
}

func totalLag(parts []partitionView) int64 {
	var n int64
	for _, p := range parts {
		if p.Lag != nil {
			n += *p.Lag
		}
	}
	return n
}

func int64Cell(v *int64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatInt(*v, 10)
}

// anyReachable reports whether a TCP connection to one of addrs opens within reachTimeout.
func anyReachable(ctx context.Context, addrs []string) bool {
	ctx, cancel := context.WithTimeout(ctx, reachTimeout)
	defer cancel()
	ok := make(chan bool, len(addrs))
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var d net.Dialer
			conn, err := d.DialContext(ctx, "tcp", a)
			if err == nil {
				conn.Close()
			}
			ok <- err == nil
		}()
	}
	wg.Wait()
	close(ok)
	for r := range ok {
		if r {
			return true
		}
	}
	return false
}
