package zkstate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// GroupSnapshot is one consumer group as the Kafka 0.8 layout holds it. The reads are
// pipelined, not one transaction: a group that changes while it is read can show a mix of
// before and after (as it can to every 0.8 tool).
type GroupSnapshot struct {
	Group string
	// Consumers are the registrations under /consumers/<g>/ids, by consumer id. A registration
	// whose JSON does not parse is left out and reported in Problems; one with no data yet is a
	// consumer registering (Consumer.Registering).
	Consumers map[string]Consumer
	// Owners maps a partition to the thread id in /consumers/<g>/owners/<t>/<p>, as written
	// (read it with OwnerOf; a value that is neither a thread id nor a registered consumer's id
	// is kept and also reported in Problems).
	Owners map[TopicPartition]string
	// OwnerSessions maps each partition of Owners to its owner znode's ephemeral owner: the
	// session holding it, 0 for a persistent znode. The thread alone does not say whose an
	// owner znode is: one deleted and created again by another session with the same thread (a
	// consumer restarted under the same id, a group's next owner adopting a bridge's znodes)
	// holds the same data (DESIGN §4).
	OwnerSessions map[TopicPartition]int64
	// Listed are the partitions with an owner znode listed under /consumers/<g>/owners/<t>, read
	// with WithOwners or WithOwnerNames (nil when neither was asked for). WithOwnerNames lists them
	// without reading them: what a claim that only needs to know which exist pays nothing for but
	// the children reads of the owners directories, in waves it runs anyway.
	Listed map[TopicPartition]bool
	// Offsets holds /consumers/<g>/offsets/<t>/<p>: the next offset to consume.
	Offsets map[TopicPartition]int64
	// Partitions maps every topic the group mentions (static subscriptions, topics a wildcard
	// subscription matches, topics under owners and offsets) to its sorted partition ids, from
	// /brokers/topics/<t>.
	Partitions map[string][]int32
	// MissingTopics are mentioned topics without /brokers/topics/<t>, sorted.
	MissingTopics []string
	// Problems are znodes whose data or name does not parse, sorted by path.
	Problems []Problem
	Stats    Stats
}

// Consumer is one registration under /consumers/<g>/ids.
type Consumer struct {
	ID           string
	Registration ConsumerRegistration
	// EphemeralOwner is the session holding the registration (0 for a persistent node, as
	// fixtures write them).
	EphemeralOwner int64
	// Registering: the ids znode has no data yet (ErrRegistrationPending), so the consumer
	// subscribes to nothing until it is filled; Registration is then an empty static one.
	Registering bool
}

// OwnerOf reads an owner znode's data (a value of Owners) against the snapshot's registrations
// (ParseOwner): the owning consumer and its thread number.
func (s *GroupSnapshot) OwnerOf(thread string) (consumerID string, n int, err error) {
	return ParseOwner(thread, func(id string) bool { _, ok := s.Consumers[id]; return ok })
}

// Problem is a znode a read skipped or kept only in part because its name or data is
// malformed. Err wraps ErrMalformed.
type Problem struct {
	Path string
	Err  error
}

// Stats says what a read cost: Reads znodes read with Requests requests to ZooKeeper, in Waves
// round trips (each wave is a set of requests in flight together, which needs the answers of
// the wave before). With multiRead, Requests is far below Reads; pipelined, they are equal.
type Stats struct {
	Reads    int
	Requests int
	Waves    int
	Elapsed  time.Duration
	// Queued is the part of Elapsed spent waiting for a multiRead connection, each of which one
	// read at a time uses: concurrent reads of the same Store queue there.
	Queued time.Duration
}

// notFoundError is ErrNoNode with a message naming what is missing.
type notFoundError struct{ what string }

func (e *notFoundError) Error() string { return "zkstate: " + e.what + " not found" }
func (e *notFoundError) Unwrap() error { return ErrNoNode }

// fanOut runs fn(0..n-1) with at most Config.Pipeline calls in flight, so n reads on the one
// connection cost about one round trip rather than n: go-zookeeper writes each request as soon
// as it is queued and matches the replies by xid. It returns early with ctx's error when ctx
// ends; calls still in flight then finish in the background and their results must be
// ignored. st, when not nil, counts the wave.
func (s *Store) fanOut(ctx context.Context, n int, st *Stats, fn func(i int)) error {
	if n == 0 {
		return nil
	}
	if st != nil {
		st.Waves++
		st.Requests += n
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(n, s.pipeline); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				fn(i)
			}
		}()
	}
	if ctx.Done() == nil {
		wg.Wait()
		return nil
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return ctx.Err() // workers skip the calls left when ctx ends
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reads is one wave of pipelined reads: Get (data) or Children of a list of paths.
type reads struct {
	paths    []string
	children bool
	data     [][]byte
	kids     [][]string
	stats    []*zk.Stat
	errs     []error
	// inSession: read on the Store's own session (pipelined), not on the multiRead connection.
	inSession bool
}

func (r *reads) add(p string) int {
	r.paths = append(r.paths, p)
	return len(r.paths) - 1
}

func (s *Store) runReads(ctx context.Context, st *Stats, waves ...*reads) error {
	var all []readRef
	for w, r := range waves {
		r.data = make([][]byte, len(r.paths))
		r.kids = make([][]string, len(r.paths))
		r.stats = make([]*zk.Stat, len(r.paths))
		r.errs = make([]error, len(r.paths))
		for i := range r.paths {
			all = append(all, readRef{w, i})
		}
	}
	if len(all) == 0 {
		return nil
	}
	// One wave, one round trip: as multiReads when the server has them, else pipelined.
	ops := make([]readOp, len(all))
	for k, rf := range all {
		ops[k] = readOp{path: s.full(waves[rf.w].paths[rf.i]), children: waves[rf.w].children}
	}
	res, requests, queued, ok := s.tryMultiRead(ctx, ops)
	if st != nil {
		st.Queued += queued
	}
	if ok {
		if st != nil {
			st.Waves++
			st.Requests += requests
			st.Reads += len(all)
		}
		for k, rf := range all {
			r := waves[rf.w]
			r.data[rf.i], r.kids[rf.i], r.stats[rf.i], r.errs[rf.i] = res[k].data, res[k].children, res[k].stat, res[k].err
		}
		return nil
	}
	return s.pipelined(ctx, st, waves, all)
}

// pipelinedReads runs the reads of one wave as pipelined Gets or Children on the Store's own
// connection, without trying multiRead.
func (s *Store) pipelinedReads(ctx context.Context, st *Stats, r *reads) error {
	r.data = make([][]byte, len(r.paths))
	r.kids = make([][]string, len(r.paths))
	r.stats = make([]*zk.Stat, len(r.paths))
	r.errs = make([]error, len(r.paths))
	all := make([]readRef, len(r.paths))
	for i := range all {
		all[i] = readRef{0, i}
	}
	return s.pipelined(ctx, st, []*reads{r}, all)
}

// readRef is read i of wave w.
type readRef struct{ w, i int }

func (s *Store) pipelined(ctx context.Context, st *Stats, waves []*reads, all []readRef) error {
	if st != nil {
		st.Reads += len(all)
	}
	for _, r := range waves {
		r.inSession = true
	}
	return s.fanOut(ctx, len(all), st, func(k int) {
		r, i := waves[all[k].w], all[k].i
		full := s.full(r.paths[i])
		if r.children {
			s.reqs.add(ReqChildren, 1)
			r.kids[i], r.stats[i], r.errs[i] = s.conn.Children(full)
		} else {
			s.reqs.add(ReqGet, 1)
			r.data[i], r.stats[i], r.errs[i] = s.conn.Get(full)
		}
	})
}

// result returns read i's error, with a missing node reported as ok=false.
func (r *reads) result(i int) (ok bool, err error) {
	switch {
	case r.errs[i] == nil:
		return true, nil
	case errors.Is(r.errs[i], zk.ErrNoNode):
		return false, nil
	}
	op := "get"
	if r.children {
		op = "children"
	}
	return false, pathErr(op, r.paths[i], r.errs[i])
}

// Snapshot reads one group: its registrations, owners and offsets, and the partitions of every
// topic it mentions, in a few pipelined waves (about 3 round trips whatever the group's size).
// Malformed znodes do not fail it; they land in Problems. A group without /consumers/<g> is an
// error wrapping ErrNoNode.
func (s *Store) Snapshot(ctx context.Context, group string) (*GroupSnapshot, error) {
	return s.SnapshotOf(ctx, group, WithOwners|WithOffsets)
}

// SnapshotPart is what a read of a group (Store.SnapshotOf) reads besides its registrations and
// the partitions of the topics they subscribe to.
type SnapshotPart uint8

const (
	// WithOwners reads /consumers/<g>/owners: GroupSnapshot.Owners, and the partitions of the
	// topics found there.
	WithOwners SnapshotPart = 1 << iota
	// WithOffsets reads /consumers/<g>/offsets: GroupSnapshot.Offsets, and the partitions of
	// the topics found there.
	WithOffsets
	// WithOwnerNames lists /consumers/<g>/owners/<t> without reading the owner znodes:
	// GroupSnapshot.Listed only (no Owners, no partitions of the topics found there). Its reads
	// join the waves of the registrations, so it adds no round trip.
	WithOwnerNames
)

// SnapshotOf is Snapshot reading only the given parts: an assignment needs the registrations
// and the partitions, a claim the owners too, and only what starts consumers needs the offsets,
// which are as many znodes as the owners. What is not read is left empty.
func (s *Store) SnapshotOf(ctx context.Context, group string, parts SnapshotPart) (*GroupSnapshot, error) {
	start := time.Now()
	if group == "" {
		return nil, errors.New("zkstate: snapshot: empty group name")
	}
	r := &snapshotRead{s: s, group: group, parts: parts, topics: map[string]bool{}, snap: &GroupSnapshot{
		Group:         group,
		Consumers:     map[string]Consumer{},
		Owners:        map[TopicPartition]string{},
		OwnerSessions: map[TopicPartition]int64{},
		Offsets:       map[TopicPartition]int64{},
		Partitions:    map[string][]int32{},
	}}
	if err := r.run(ctx); err != nil {
		var nf *notFoundError
		if errors.As(err, &nf) {
			return nil, err
		}
		return nil, fmt.Errorf("zkstate: snapshot of group %q: %w", group, err)
	}
	slices.Sort(r.snap.MissingTopics)
	sortProblems(r.snap.Problems)
	r.snap.Stats.Elapsed = time.Since(start)
	return r.snap, nil
}

// snapshotRead is one SnapshotOf in progress: each wave is one round trip, and what a wave
// finds decides the next one's reads.
type snapshotRead struct {
	s     *Store
	group string
	parts SnapshotPart
	snap  *GroupSnapshot

	dirs                      *reads // wave 1: the group and its directories
	idsI, ownersI, offsetsI   int    // their indexes in dirs; -1 for a directory not asked for
	ownerTopics, offsetTopics *reads // wave 2: the partitions under owners/<t> and offsets/<t>
	topics                    map[string]bool
	wildcards                 []Consumer
}

func (r *snapshotRead) run(ctx context.Context) error {
	if err := r.readDirs(ctx); err != nil {
		return err
	}
	if err := r.readRegistrations(ctx); err != nil {
		return err
	}
	allTopics, err := r.readOwnersAndOffsets(ctx)
	if err != nil {
		return err
	}
	if len(r.wildcards) > 0 {
		return r.readWildcardTopics(ctx, allTopics)
	}
	return nil
}

func (r *snapshotRead) problem(p string, err error) {
	r.snap.Problems = append(r.snap.Problems, Problem{Path: p, Err: err})
}

// readDirs is wave 1: the group and its three directories.
func (r *snapshotRead) readDirs(ctx context.Context) error {
	w1 := &reads{children: true}
	w1.add(GroupPath(r.group))
	r.idsI = w1.add(IDsPath(r.group))
	read := []int{r.idsI}
	// A directory not asked for is read as one that does not exist: no children.
	dir := func(part SnapshotPart, p string) int {
		if r.parts&part == 0 {
			return -1
		}
		i := w1.add(p)
		read = append(read, i)
		return i
	}
	r.ownersI, r.offsetsI = dir(WithOwners|WithOwnerNames, OwnersPath(r.group)), dir(WithOffsets, OffsetsPath(r.group))
	r.dirs = w1
	if err := r.s.runReads(ctx, &r.snap.Stats, w1); err != nil {
		return err
	}
	if ok, err := w1.result(0); err != nil {
		return err
	} else if !ok {
		return &notFoundError{what: fmt.Sprintf("group %q", r.group)}
	}
	for _, i := range read {
		if _, err := w1.result(i); err != nil {
			return err
		}
	}
	return nil
}

func (r *snapshotRead) kids(i int) []string {
	if i < 0 {
		return nil
	}
	return r.dirs.kids[i]
}

// readRegistrations is wave 2: the registrations, and the partitions under owners/<t> and
// offsets/<t>.
func (r *snapshotRead) readRegistrations(ctx context.Context) error {
	regs := &reads{}
	ids := r.dirs.kids[r.idsI]
	for _, id := range ids {
		regs.add(IDPath(r.group, id))
	}
	r.ownerTopics, r.offsetTopics = &reads{children: true}, &reads{children: true}
	for _, t := range r.kids(r.ownersI) {
		r.ownerTopics.add(OwnersTopicPath(r.group, t))
	}
	for _, t := range r.kids(r.offsetsI) {
		r.offsetTopics.add(OffsetsTopicPath(r.group, t))
	}
	if err := r.s.runReads(ctx, &r.snap.Stats, regs, r.ownerTopics, r.offsetTopics); err != nil {
		return err
	}
	if err := r.listOwners(); err != nil {
		return err
	}
	for i, id := range ids {
		ok, err := regs.result(i)
		if err != nil {
			return err
		}
		if !ok {
			continue // the consumer left between our two reads
		}
		reg, err := ParseConsumerRegistration(regs.data[i])
		if errors.Is(err, ErrRegistrationPending) {
			r.snap.Consumers[id] = Consumer{ID: id, EphemeralOwner: regs.stats[i].EphemeralOwner, Registering: true,
				Registration: ConsumerRegistration{Version: 1, Pattern: PatternStatic, Subscription: map[string]int{}}}
			continue
		}
		if err != nil {
			r.problem(regs.paths[i], err)
			continue
		}
		c := Consumer{ID: id, Registration: reg, EphemeralOwner: regs.stats[i].EphemeralOwner}
		r.snap.Consumers[id] = c
		if reg.Pattern == PatternStatic || reg.Pattern == "" {
			for t := range reg.Subscription {
				r.topics[t] = true
			}
		} else {
			r.wildcards = append(r.wildcards, c)
		}
	}
	return nil
}

// readOwnersAndOffsets is wave 3: owners, offsets, topic assignments, and the topic list when
// a registration subscribes by pattern (returned, for wave 4).
func (r *snapshotRead) readOwnersAndOffsets(ctx context.Context) (*reads, error) {
	owners, offsets := &reads{}, &reads{}
	var ownerTPs []TopicPartition
	if r.parts&WithOwners != 0 {
		var err error
		ownerTPs, err = r.partitionReads(r.kids(r.ownersI), r.ownerTopics, owners, func(t string, p int32) string { return OwnerPath(r.group, t, p) })
		if err != nil {
			return nil, err
		}
	}
	offsetTPs, err := r.partitionReads(r.kids(r.offsetsI), r.offsetTopics, offsets, func(t string, p int32) string { return OffsetPath(r.group, t, p) })
	if err != nil {
		return nil, err
	}
	assignments := &reads{}
	var assignmentTopics []string
	for _, t := range sortedKeys(r.topics) {
		assignments.add(TopicPath(t))
		assignmentTopics = append(assignmentTopics, t)
	}
	allTopics := &reads{children: true}
	if len(r.wildcards) > 0 {
		allTopics.add(TopicsPath)
	}
	if err := r.s.runReads(ctx, &r.snap.Stats, owners, offsets, assignments, allTopics); err != nil {
		return nil, err
	}
	for i, tp := range ownerTPs {
		ok, err := owners.result(i)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		thread := string(owners.data[i])
		r.snap.Owners[tp] = thread
		r.snap.OwnerSessions[tp] = owners.stats[i].EphemeralOwner
		if _, _, err := r.snap.OwnerOf(thread); err != nil {
			r.problem(owners.paths[i], err)
		}
	}
	for i, tp := range offsetTPs {
		ok, err := offsets.result(i)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		off, err := ParseOffset(offsets.data[i])
		if err != nil {
			r.problem(offsets.paths[i], err)
			continue
		}
		r.snap.Offsets[tp] = off
	}
	if err := r.s.collectAssignments(r.snap, assignments, assignmentTopics); err != nil {
		return nil, err
	}
	return allTopics, nil
}

// listOwners fills Listed from the children of the owners directories (wave 2). Names that do
// not parse are left to partitionReads, which reports them (WithOwners).
func (r *snapshotRead) listOwners() error {
	if r.ownersI < 0 {
		return nil
	}
	r.snap.Listed = map[TopicPartition]bool{}
	for i, t := range r.kids(r.ownersI) {
		ok, err := r.ownerTopics.result(i)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for _, name := range r.ownerTopics.kids[i] {
			if p, err := parsePartition(name); err == nil {
				r.snap.Listed[TopicPartition{Topic: t, Partition: p}] = true
			}
		}
	}
	return nil
}

// partitionReads adds to out a read of every partition znode listed under the topic directories
// (topics, whose children wave 2 read into dirs), and returns their partitions in out's order.
// Every topic found there is one the group mentions.
func (r *snapshotRead) partitionReads(topics []string, dirs, out *reads, path func(t string, p int32) string) ([]TopicPartition, error) {
	var tps []TopicPartition
	for i, t := range topics {
		ok, err := dirs.result(i)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		r.topics[t] = true
		for _, name := range dirs.kids[i] {
			p, err := parsePartition(name)
			if err != nil {
				r.problem(dirs.paths[i]+"/"+name, err)
				continue
			}
			out.add(path(t, p))
			tps = append(tps, TopicPartition{Topic: t, Partition: p})
		}
	}
	return tps, nil
}

// readWildcardTopics is wave 4, only for pattern subscriptions: the assignments of the matching
// topics not read yet.
func (r *snapshotRead) readWildcardTopics(ctx context.Context, allTopics *reads) error {
	if _, err := allTopics.result(0); err != nil {
		return err
	}
	more := &reads{}
	var moreTopics []string
	seen := map[string]bool{}
	for _, c := range r.wildcards {
		matched, err := WildcardThreads(c.ID, c.Registration, allTopics.kids[0])
		if err != nil {
			r.problem(IDPath(r.group, c.ID), err)
			continue
		}
		for _, t := range sortedKeys(matched) {
			if !r.topics[t] && !seen[t] {
				seen[t] = true
				more.add(TopicPath(t))
				moreTopics = append(moreTopics, t)
			}
		}
	}
	if err := r.s.runReads(ctx, &r.snap.Stats, more); err != nil {
		return err
	}
	return r.s.collectAssignments(r.snap, more, moreTopics)
}

func (s *Store) collectAssignments(snap *GroupSnapshot, r *reads, topics []string) error {
	for i, t := range topics {
		ok, err := r.result(i)
		if err != nil {
			return err
		}
		if !ok {
			snap.MissingTopics = append(snap.MissingTopics, t)
			continue
		}
		a, err := ParseTopicAssignment(r.data[i])
		if err != nil {
			snap.Problems = append(snap.Problems, Problem{Path: r.paths[i], Err: err})
			continue
		}
		snap.Partitions[t] = a.PartitionIDs()
	}
	return nil
}

// parsePartition reads a partition znode name as Kafka writes it (decimal, no sign, no leading
// zeros).
func parsePartition(name string) (int32, error) {
	v, err := strconv.ParseInt(name, 10, 32)
	if err != nil || v < 0 || strconv.FormatInt(v, 10) != name {
		return 0, fmt.Errorf("%w: partition name %q is not a partition number", ErrMalformed, name)
	}
	return int32(v), nil
}

func sortProblems(ps []Problem) {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
}

// Groups lists the groups under /consumers, sorted; none when /consumers is missing.
func (s *Store) Groups(ctx context.Context) ([]string, error) {
	groups, _, err := s.Children(ctx, ConsumersPath)
	if errors.Is(err, ErrNoNode) {
		return nil, nil
	}
	return groups, err
}

// Brokers reads every registration under /brokers/ids, pipelined, sorted by id. Malformed
// ones are left out and reported as Problems.
func (s *Store) Brokers(ctx context.Context) ([]BrokerRegistration, []Problem, error) {
	ids, _, err := s.Children(ctx, BrokerIDsPath)
	if errors.Is(err, ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var problems []Problem
	r := &reads{}
	var brokerIDs []int32
	for _, name := range ids {
		id, err := parseBrokerID(name)
		if err != nil {
			problems = append(problems, Problem{Path: BrokerIDsPath + "/" + name, Err: err})
			continue
		}
		r.add(BrokerPath(id))
		brokerIDs = append(brokerIDs, id)
	}
	if err := s.runReads(ctx, nil, r); err != nil {
		return nil, nil, fmt.Errorf("zkstate: brokers: %w", err)
	}
	var out []BrokerRegistration
	for i, id := range brokerIDs {
		ok, err := r.result(i)
		if err != nil {
			return nil, nil, fmt.Errorf("zkstate: brokers: %w", err)
		}
		if !ok {
			continue
		}
		b, err := ParseBrokerRegistration(id, r.data[i])
		if err != nil {
			problems = append(problems, Problem{Path: r.paths[i], Err: err})
			continue
		}
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b BrokerRegistration) int { return int(a.ID) - int(b.ID) })
	sortProblems(problems)
	return out, problems, nil
}

func parseBrokerID(name string) (int32, error) {
	v, err := strconv.ParseInt(name, 10, 32)
	if err != nil || strconv.FormatInt(v, 10) != name {
		return 0, fmt.Errorf("%w: broker id %q is not a number", ErrMalformed, name)
	}
	return int32(v), nil
}

// Topics reads every topic's replica assignment under /brokers/topics, pipelined. Malformed
// ones are left out and reported as Problems.
func (s *Store) Topics(ctx context.Context) (map[string]TopicAssignment, []Problem, error) {
	names, _, err := s.Children(ctx, TopicsPath)
	if errors.Is(err, ErrNoNode) {
		return map[string]TopicAssignment{}, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	r := &reads{}
	for _, t := range names {
		r.add(TopicPath(t))
	}
	if err := s.runReads(ctx, nil, r); err != nil {
		return nil, nil, fmt.Errorf("zkstate: topics: %w", err)
	}
	out := make(map[string]TopicAssignment, len(names))
	var problems []Problem
	for i, t := range names {
		ok, err := r.result(i)
		if err != nil {
			return nil, nil, fmt.Errorf("zkstate: topics: %w", err)
		}
		if !ok {
			continue
		}
		a, err := ParseTopicAssignment(r.data[i])
		if err != nil {
			problems = append(problems, Problem{Path: r.paths[i], Err: err})
			continue
		}
		out[t] = a
	}
	sortProblems(problems)
	return out, problems, nil
}
