package migrate

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Member is one member of a group as the census sees it.
type Member struct {
	// ID is the consumer id of its registration in /consumers/<g>/ids (zk and legacy members,
	// and Kafka members a bridge mirrors), or the Kafka member id of a member known only from
	// the group record.
	ID   string `json:"id"`
	Kind string `json:"kind"` // zkstate.KindKafka, KindLegacy or KindZK
	// Node is the bridge hosting the member (0 for a zk member or one known only from the record).
	Node int32 `json:"node,omitempty"`
	// Source says where the member was found: "ids" (a registration, with or without a hosted
	// znode), "hosted" (a hosted znode without a registration: a finalized group's mirror is
	// off) or "record" (the group record only).
	Source string `json:"source"`
}

// Census is what ZooKeeper says about one group, as a migration needs it.
type Census struct {
	Group string
	// Exists: /consumers/<g> or <root>/groups/<g> is there. A group that is in neither is
	// unknown to every bridge and every 0.8 consumer.
	Exists bool
	// Mode is the mode in force: the record's, or the default a bridge would persist when the
	// group has no record yet (Recorded false; DefaultWhy says why).
	Mode       zkstate.Mode
	Recorded   bool
	DefaultWhy string
	// ModeVersion is the mode record's znode version for SetMode's compare-and-set
	// (zkstate.NoModeVersion without a record); ModeZxid when it was last written (for a
	// finalized group: when the 0.8 mirror stopped).
	ModeVersion int32
	ModeZxid    int64
	// Record is the mode record (zero without one).
	Record zkstate.ModeRecord
	// Members of every kind, sorted by kind then id.
	Members []Member
	// Departed are Kafka members left in the group record of a bridge that is gone: no bridge
	// serves them, so they are not members (a bridge that takes the group over drops them when
	// their session times out). Shown, not counted.
	Departed []Member
	// Mirror is set when the census was read with CensusOptions.Mirror.
	Mirror *Mirror
	// Problems are znodes that did not parse (a hosted member, the group record); the census
	// goes on without them, so a count may be low: callers show them.
	Problems []string
}

// Count returns how many members of the kind the group has.
func (c Census) Count(kind string) int {
	n := 0
	for _, m := range c.Members {
		if m.Kind == kind {
			n++
		}
	}
	return n
}

// MembersOf returns the ids of the group's members of the kind.
func (c Census) MembersOf(kind string) []string {
	var ids []string
	for _, m := range c.Members {
		if m.Kind == kind {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// Mirror says whether the Kafka 0.8 view of the group's offsets (/consumers/<g>/offsets, which
// 0.8 consumers and tools read) holds what the bridge last committed.
//
// The bridge writes a Kafka member's commit to both its own record and the 0.8 znode in one
// multi (they share a Mzxid), and 0.8 consumers write the 0.8 znode alone. So a partition is
// stale when the bridge's record is newer than the 0.8 znode and holds another offset (or the
// 0.8 znode is missing): the mirror missed a commit. A finalized group's mirror is Off by
// design, and its stale partitions are those committed since.
type Mirror struct {
	Off   bool                     `json:"off"`
	Stale []zkstate.TopicPartition `json:"stale,omitempty"`
	// Partitions is how many partitions have an offset in either place.
	Partitions int `json:"partitions"`
}

// Current reports a mirror that is on and holds every commit.
func (m Mirror) Current() bool { return !m.Off && len(m.Stale) == 0 }

// CensusOptions modifies ReadCensus.
type CensusOptions struct {
	// Mirror also reads every offset of the group, both 0.8 and the bridge's, to tell whether
	// the mirror is current (two reads per partition: status shows it, plans do not need it).
	Mirror bool
}

// ReadCensus reads one group's census: four reads in one round trip (the mode record, the group
// record, the registrations, the hosted-member znodes), then one per hosted member; for a group
// without a mode record, the default-mode rule's reads; with CensusOptions.Mirror, every offset.
func ReadCensus(ctx context.Context, s *zkstate.Store, root, group string, opts CensusOptions) (Census, error) {
	c := Census{Group: group, ModeVersion: zkstate.NoModeVersion}
	if err := checkName(group); err != nil {
		return c, err
	}
	if err := c.read(ctx, s, root, opts); err != nil {
		return c, fmt.Errorf("migrate: census of group %q: %w", group, err)
	}
	return c, nil
}

// censusHeads is the census's first wave: what every census needs.
type censusHeads struct {
	modeData, recData       []byte
	modeStat                zkstate.Stat
	ids, hosted             []string
	modeErr, recErr, idsErr error
	hostedErr               error
}

func (c *Census) read(ctx context.Context, s *zkstate.Store, root string, opts CensusOptions) error {
	var h censusHeads
	// One wave: what every census needs. What only a group without a mode record needs (the
	// default-mode rule) is read after, for those groups alone.
	parallel(ctx, 4, func(i int) {
		switch i {
		case 0:
			h.modeData, h.modeStat, h.modeErr = s.Get(ctx, zkstate.ModePath(root, c.Group))
		case 1:
			h.recData, _, h.recErr = s.Get(ctx, zkstate.GroupRecordPath(root, c.Group))
		case 2:
			h.ids, _, h.idsErr = s.Children(ctx, zkstate.IDsPath(c.Group))
		case 3:
			h.hosted, _, h.hostedErr = s.Children(ctx, zkstate.HostedPath(root, c.Group))
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, err := range []error{h.modeErr, h.recErr, h.idsErr, h.hostedErr} {
		if err != nil && !errors.Is(err, zkstate.ErrNoNode) {
			return err
		}
	}
	c.Exists = h.modeErr == nil || h.recErr == nil || h.idsErr == nil || h.hostedErr == nil

	if h.modeErr == nil {
		rec, err := zkstate.ParseModeRecord(h.modeData)
		if err != nil {
			// A record no bridge can read: the bridges refuse to serve the group until it is
			// rewritten, and so does a migration (it could not tell which step it takes).
			return fmt.Errorf("%s: %w (no bridge serves the group until it is repaired: "+
				"set it to a mode record by hand, or delete it to have the group's default persisted again)", zkstate.ModePath(root, c.Group), err)
		}
		c.Mode, c.Recorded, c.Record = rec.Mode, true, rec
		c.ModeVersion, c.ModeZxid = h.modeStat.Version, h.modeStat.Mzxid
	}

	// Kafka members of the group record.
	var rec zkstate.GroupRecordHead
	hasRecord := h.recErr == nil
	if hasRecord {
		var err error
		if rec, err = zkstate.ParseGroupRecordHead(h.recData); err != nil {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: %v", zkstate.GroupRecordPath(root, c.Group), err))
			rec = zkstate.GroupRecordHead{} // it exists all the same: the bridge served Kafka members
		}
	}
	if err := c.readMembers(ctx, s, root, h.ids, h.hosted, rec); err != nil {
		return err
	}
	if !c.Recorded {
		if err := c.readDefaultMode(ctx, s, root, hasRecord); err != nil {
			return err
		}
	}
	if opts.Mirror {
		m, err := readMirror(ctx, s, root, c.Group, c.Mode == zkstate.ModeFinalized)
		if err != nil {
			return err
		}
		c.Mirror = &m
	}
	return nil
}

// readMembers tells which kind stands behind each registration (ids) from the hosted-member
// znodes (hosted), and adds the group record's Kafka members that neither lists.
func (c *Census) readMembers(ctx context.Context, s *zkstate.Store, root string, ids, hosted []string, rec zkstate.GroupRecordHead) error {
	hostedBy, err := c.readHosted(ctx, s, root, hosted)
	if err != nil {
		return err
	}
	kafkaIDs := map[string]bool{} // Kafka member ids already counted
	for _, id := range ids {
		h, ok := hostedBy[id]
		if !ok {
			c.Members = append(c.Members, Member{ID: id, Kind: zkstate.KindZK, Source: "ids"})
			continue
		}
		c.Members = append(c.Members, Member{ID: id, Kind: h.Kind, Node: h.Node, Source: "ids"})
		if h.Kind == zkstate.KindKafka {
			kafkaIDs[h.Member] = true
		}
		delete(hostedBy, id)
	}
	for id, h := range hostedBy { // hosted without a registration (the mirror is off)
		c.Members = append(c.Members, Member{ID: id, Kind: h.Kind, Node: h.Node, Source: "hosted"})
		if h.Kind == zkstate.KindKafka {
			kafkaIDs[h.Member] = true
		}
	}
	var fromRecord []Member
	if !rec.Deleted {
		for _, m := range rec.Members {
			if m.ID == "" || kafkaIDs[m.ID] {
				continue
			}
			kafkaIDs[m.ID] = true
			fromRecord = append(fromRecord, Member{ID: m.ID, Kind: zkstate.KindKafka, Source: "record"})
		}
	}
	if len(fromRecord) > 0 {
		// Members a record holds stay in it until a bridge serving the group sees their session
		// time out. With every bridge stopped (as before a handoff) nobody serves them and
		// nobody ever will time them out: they count only while the bridge that holds the group
		// (its epoch names it) is alive.
		alive, err := holderAlive(ctx, s, root, c.Group)
		if err != nil {
			return err
		}
		if alive {
			c.Members = append(c.Members, fromRecord...)
		} else {
			for i := range fromRecord {
				fromRecord[i].Source = "record, bridge gone"
			}
			c.Departed = fromRecord
		}
	}
	slices.SortFunc(c.Members, func(a, b Member) int {
		if a.Kind != b.Kind {
			return kindOrder(a.Kind) - kindOrder(b.Kind)
		}
		return cmpString(a.ID, b.ID)
	})
	return nil
}

// readHosted reads the hosted-member znodes, one read each in one round trip. One that does
// not parse is a problem of the census, not its failure.
func (c *Census) readHosted(ctx context.Context, s *zkstate.Store, root string, hosted []string) (map[string]zkstate.HostedMember, error) {
	hostedData := make([][]byte, len(hosted))
	hostedErrs := make([]error, len(hosted))
	parallel(ctx, len(hosted), func(i int) {
		hostedData[i], _, hostedErrs[i] = s.Get(ctx, zkstate.HostedMemberPath(root, c.Group, hosted[i]))
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	hostedBy := map[string]zkstate.HostedMember{}
	for i, id := range hosted {
		switch err := hostedErrs[i]; {
		case errors.Is(err, zkstate.ErrNoNode):
			continue // its member left since the listing
		case err != nil:
			return nil, err
		}
		h, err := zkstate.ParseHostedMember(hostedData[i])
		if err != nil {
			c.Problems = append(c.Problems, fmt.Sprintf("%s: %v", zkstate.HostedMemberPath(root, c.Group, id), err))
			continue
		}
		hostedBy[id] = h
	}
	return hostedBy, nil
}

// readDefaultMode, for a group without a mode record, decides the mode a bridge would persist
// when it first serves the group (bridge/modes.go defaultFor): kafka when the bridge already
// keeps a record (hasRecord) or offsets of its own for it, else zkstate.DefaultMode.
func (c *Census) readDefaultMode(ctx context.Context, s *zkstate.Store, root string, hasRecord bool) error {
	var ownOffsOK, groupOK, dirOK bool
	var ownErr, groupErr, dirErr error
	parallel(ctx, 3, func(i int) {
		switch i {
		case 0:
			ownOffsOK, _, ownErr = s.Exists(ctx, zkstate.OwnOffsetsPath(root, c.Group))
		case 1:
			groupOK, _, groupErr = s.Exists(ctx, zkstate.GroupPath(c.Group))
		case 2:
			dirOK, _, dirErr = s.Exists(ctx, zkstate.BridgeGroupPath(root, c.Group))
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := errors.Join(ownErr, groupErr, dirErr); err != nil {
		return err
	}
	c.Exists = c.Exists || groupOK || dirOK
	switch {
	case hasRecord:
		c.Mode, c.DefaultWhy = zkstate.ModeKafka, zkstate.GroupRecordPath(root, c.Group)+" exists: the group was served to Kafka members"
	case ownOffsOK:
		c.Mode, c.DefaultWhy = zkstate.ModeKafka, zkstate.OwnOffsetsPath(root, c.Group)+" exists: the group was served to Kafka members"
	default:
		mode, why, err := zkstate.DefaultMode(ctx, s, c.Group)
		if err != nil {
			return err
		}
		c.Mode, c.DefaultWhy = mode, why
	}
	return nil
}

// holderAlive reports whether the bridge that holds the group is running: the group's epoch
// (zkstate.Epoch) names its node id, and a running bridge holds its ephemeral registration
// zkstate.BridgePath. An epoch that is missing or unreadable counts as alive (the careful
// answer: its members then count).
func holderAlive(ctx context.Context, s *zkstate.Store, root, group string) (bool, error) {
	data, _, err := s.Get(ctx, zkstate.EpochPath(root, group))
	if errors.Is(err, zkstate.ErrNoNode) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	epoch, err := zkstate.ParseEpoch(data)
	if err != nil {
		return true, nil
	}
	ok, _, err := s.Exists(ctx, zkstate.BridgePath(root, epoch.NodeID))
	return ok, err
}

func kindOrder(kind string) int {
	switch kind {
	case zkstate.KindKafka:
		return 0
	case zkstate.KindLegacy:
		return 1
	case zkstate.KindZK:
		return 2
	}
	return 3
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// readMirror compares the 0.8 offsets with the bridge's records (see Mirror).
func readMirror(ctx context.Context, s *zkstate.Store, root, group string, finalized bool) (Mirror, error) {
	m := Mirror{Off: finalized}
	offs, err := readAllOffsets(ctx, s, root, group)
	if err != nil {
		return m, err
	}
	m.Partitions = len(offs)
	for _, o := range offs {
		if !o.HasOwn {
			continue
		}
		if !o.HasZK || (o.OwnZxid > o.ZKZxid && o.Own.Offset != o.ZK) {
			m.Stale = append(m.Stale, o.TopicPartition)
		}
	}
	return m, nil
}

// ReadCensuses reads the census of every group, a few groups at a time, in the order given.
func ReadCensuses(ctx context.Context, s *zkstate.Store, root string, groups []string, opts CensusOptions) ([]Census, error) {
	out := make([]Census, len(groups))
	errs := make([]error, len(groups))
	sem := make(chan struct{}, DefaultParallel)
	var wg sync.WaitGroup
	for i, g := range groups {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i], errs[i] = ReadCensus(ctx, s, root, g, opts)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ListGroups returns every group a migration can see, sorted: the groups under /consumers and
// those the bridges keep state for under <root>/groups.
func ListGroups(ctx context.Context, s *zkstate.Store, root string) ([]string, error) {
	var zkGroups, own []string
	var zkErr, ownErr error
	parallel(ctx, 2, func(i int) {
		if i == 0 {
			zkGroups, zkErr = s.Groups(ctx)
		} else {
			own, _, ownErr = s.Children(ctx, zkstate.BridgeGroupsPath(root))
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if errors.Is(ownErr, zkstate.ErrNoNode) {
		ownErr = nil
	}
	if err := errors.Join(zkErr, ownErr); err != nil {
		return nil, fmt.Errorf("migrate: list groups: %w", err)
	}
	all := slices.Concat(zkGroups, own)
	slices.Sort(all)
	return slices.Compact(all), nil
}

// Selector chooses groups: exactly one of its fields is set.
type Selector struct {
	Groups []string       // these groups (an unknown one is an error)
	All    bool           // every group ListGroups finds
	Match  *regexp.Regexp // the groups whose whole name matches
}

// ErrUnknownGroup: a group named by a Selector is in neither /consumers nor <root>/groups.
var ErrUnknownGroup = errors.New("group not found")

// Select resolves a selector into sorted group names. Named groups are checked to exist (under
// /consumers or <root>/groups), so a typo is not planned as a new, empty group.
func Select(ctx context.Context, s *zkstate.Store, root string, sel Selector) ([]string, error) {
	n := 0
	if len(sel.Groups) > 0 {
		n++
	}
	if sel.All {
		n++
	}
	if sel.Match != nil {
		n++
	}
	if n != 1 {
		return nil, errors.New("migrate: choose groups with exactly one of a list of groups, all groups, or a pattern")
	}
	if len(sel.Groups) > 0 {
		groups := slices.Clone(sel.Groups)
		slices.Sort(groups)
		groups = slices.Compact(groups)
		missing := make([]bool, len(groups))
		errs := make([]error, len(groups))
		parallel(ctx, len(groups), func(i int) {
			if err := checkName(groups[i]); err != nil {
				errs[i] = err
				return
			}
			a, _, err := s.Exists(ctx, zkstate.GroupPath(groups[i]))
			if err != nil {
				errs[i] = err
				return
			}
			b, _, err := s.Exists(ctx, zkstate.BridgeGroupPath(root, groups[i]))
			errs[i], missing[i] = err, !a && !b
		})
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		for i, g := range groups {
			if errs[i] != nil {
				return nil, fmt.Errorf("migrate: group %q: %w", g, errs[i])
			}
			if missing[i] {
				return nil, fmt.Errorf("migrate: group %q: %w under %s or %s", g, ErrUnknownGroup, zkstate.ConsumersPath, zkstate.BridgeGroupsPath(root))
			}
		}
		return groups, nil
	}
	all, err := ListGroups(ctx, s, root)
	if err != nil || sel.All {
		return all, err
	}
	// The pattern must match the whole name (as Java's String.matches does, and as an operator
	// who writes --match 'billing-.*' expects): not every group that merely contains the text.
	whole, err := regexp.Compile(`^(?:` + sel.Match.String() + `)$`)
	if err != nil {
		return nil, fmt.Errorf("migrate: pattern %q: %w", sel.Match, err)
	}
	var out []string
	for _, g := range all {
		if whole.MatchString(g) {
			out = append(out, g)
		}
	}
	return out, nil
}

// checkName refuses a group name that cannot be one znode name.
func checkName(group string) error {
	if group == "" || group == "." || group == ".." || slices.Contains([]byte(group), '/') {
		return fmt.Errorf("migrate: group name %q cannot be a znode name", group)
	}
	return nil
}

// parallel runs fn(0..n-1), at most 64 at a time, and waits for all of them: one ZooKeeper
// session pipelines concurrent requests, so n reads cost about one round trip. Calls not yet
// started when ctx ends are skipped; callers check ctx afterwards.
func parallel(ctx context.Context, n int, fn func(i int)) {
	const limit = 64
	if n == 1 {
		fn(0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, limit)
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}
