package migrate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/zkbridge/zkbridge/zkstate"
)

// Defaults of ApplyOptions.
const (
	DefaultParallel = 8
	DefaultPoll     = time.Second
	// maxRetries bounds how often one group is re-planned after a concurrent change that kept
	// it on its way (a bridge persisting its default, another applier taking a step first).
	maxRetries = 5
)

// ApplyOptions configures Apply.
type ApplyOptions struct {
	Request
	// Who is recorded as the author of every transition ("ops@laptop"); required.
	Who string
	// Reason, when set, is recorded in every transition (zkstate.Transition.Reason) beside
	// the one Apply adds for a forced step.
	Reason string
	// Wait is how long a group blocked by members that may leave (legacy or zk members before
	// kafka, Kafka members before legacy) is polled, every Poll, before it is reported blocked.
	Wait time.Duration
	Poll time.Duration // default DefaultPoll
	// Batch is how many groups are taken at a time (0: all in one batch); Pause is the wait
	// between two batches, for an operator to watch the first ones before the next.
	Batch int
	Pause time.Duration
	// Parallel is how many groups of a batch are worked on at once (default DefaultParallel).
	Parallel int
	// DryRun plans every group and writes nothing; results then have status ready, blocked,
	// refused, at-target or past-target.
	DryRun bool
	// OnResult, when set, is told about every group once it is done with, one call at a time.
	OnResult func(Result)
	// OnPause, when set, is called before each pause between batches, with the number of
	// groups done so far.
	OnPause func(done int, pause time.Duration)
}

// Result is what Apply did to one group.
type Result struct {
	Group  string       `json:"group"`
	Target zkstate.Mode `json:"target"`
	// From is the group's mode when Apply first read it; Mode when it was done with it.
	From   zkstate.Mode `json:"from"`
	Mode   zkstate.Mode `json:"mode"`
	Status Status       `json:"status"`
	// Applied are the transitions this call recorded, in order: a transition someone else
	// recorded concurrently is never in it.
	Applied []Step `json:"applied,omitempty"`
	// Steps is the plan (dry run), or the steps left when the group was blocked.
	Steps []Step `json:"steps,omitempty"`
	// Blockers hold the group back (blocked), or were overridden (forced steps).
	Blockers []Blocker `json:"blockers,omitempty"`
	// Reason is a sentence for people: why blocked, refused, in conflict, failed.
	Reason string `json:"reason,omitempty"`
	// Waited is how long the group was polled for members to leave.
	Waited time.Duration `json:"-"`
	Err    error         `json:"-"`
}

// Validate reports options Apply cannot use.
func (o ApplyOptions) Validate() error {
	switch {
	case !o.Target.Valid():
		return fmt.Errorf("migrate: unknown target mode %q", o.Target)
	case o.Who == "" && !o.DryRun:
		return errors.New("migrate: who is required: every transition records who made it")
	case o.Batch < 0, o.Parallel < 0, o.Wait < 0, o.Pause < 0, o.Poll < 0:
		return errors.New("migrate: negative batch, parallelism, wait, pause or poll")
	}
	return nil
}

// Apply takes each group to opts.Target, step by step (see Plan), and returns one Result per
// group in the order given.
//
// Each step is one zkstate.SetMode: one compare-and-set on the group's mode record, atomic with
// the transition it records. Before every step the group's census is read again and the plan
// computed again, so the step's preconditions hold on what ZooKeeper says at that moment. When
// the compare-and-set loses to a concurrent change, the group is read again: at the target, it
// is done (and the transition is recorded once, by whoever won); moved along the same way, it
// is planned again from there; moved elsewhere (a rollback while we migrate), it is reported as
// a conflict and left as it is.
//
// Groups go in batches of opts.Batch, opts.Parallel at a time, with opts.Pause between batches.
// A group that failed (an error, not a precondition or a conflict) stops Apply from starting
// the next batch: the remaining groups are reported not-started. Apply is resumable: a re-run
// finds the groups already at the target and leaves them alone.
//
// The error is ctx's when it ended (groups not reached are then not-started; a step in flight
// may or may not have been applied, and a re-run reads it back), or the options' when invalid.
func Apply(ctx context.Context, s *zkstate.Store, root string, groups []string, opts ApplyOptions) ([]Result, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Poll == 0 {
		opts.Poll = DefaultPoll
	}
	if opts.Parallel == 0 {
		opts.Parallel = DefaultParallel
	}
	batch := opts.Batch
	if batch == 0 || batch > len(groups) {
		batch = len(groups)
	}
	results := make([]Result, len(groups))
	for i, g := range groups {
		results[i] = Result{Group: g, Target: opts.Target, Status: StatusNotStarted}
	}
	var mu sync.Mutex // serialises OnResult
	report := func(r Result) {
		if opts.OnResult == nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		opts.OnResult(r)
	}
	stopped := ""
	for start := 0; start < len(groups); start += batch {
		end := min(start+batch, len(groups))
		if start > 0 && opts.Pause > 0 && !opts.DryRun {
			if opts.OnPause != nil {
				opts.OnPause(start, opts.Pause)
			}
			if err := sleep(ctx, opts.Pause); err != nil {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
		failed := runBatch(ctx, s, root, groups[start:end], results[start:end], opts, report)
		if failed > 0 && end < len(groups) {
			stopped = fmt.Sprintf("not started: %d group(s) of the previous batch failed", failed)
			break
		}
	}
	for i := range results {
		if results[i].Status != StatusNotStarted {
			continue
		}
		switch {
		case ctx.Err() != nil:
			results[i].Reason = "not started: " + ctx.Err().Error()
		default:
			results[i].Reason = stopped
		}
		report(results[i])
	}
	return results, ctx.Err()
}

// runBatch applies one batch, opts.Parallel groups at a time, and returns how many failed.
func runBatch(ctx context.Context, s *zkstate.Store, root string, groups []string, out []Result, opts ApplyOptions, report func(Result)) int {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(opts.Parallel, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = applyGroup(ctx, s, root, groups[i], opts)
				report(out[i])
			}
		}()
	}
feed:
	for i := range groups {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	failed := 0
	for _, r := range out {
		if r.Status == StatusFailed {
			failed++
		}
	}
	return failed
}

// applyGroup takes one group to the target (see Apply).
func applyGroup(ctx context.Context, s *zkstate.Store, root, group string, opts ApplyOptions) Result {
	r := Result{Group: group, Target: opts.Target}
	fail := func(err error) Result {
		r.Err = err
		r.Reason = err.Error()
		r.Status = StatusFailed
		if ctx.Err() != nil {
			r.Status = StatusInterrupted
			r.Reason = ctx.Err().Error() + "; a re-run reads back where the group is"
		}
		return r
	}
	var deadline time.Time
	if opts.Wait > 0 {
		deadline = time.Now().Add(opts.Wait)
	}
	waitStart := time.Time{}
	retries := 0
	first := true
	for {
		c, err := ReadCensus(ctx, s, root, group, CensusOptions{})
		if err != nil {
			return fail(err)
		}
		if first {
			r.From, first = c.Mode, false
		}
		r.Mode = c.Mode
		p := Plan(c, opts.Request)
		if opts.DryRun {
			r.Status, r.Steps, r.Reason = p.Status, p.Steps, p.Reason
			for _, st := range p.Steps {
				r.Blockers = append(r.Blockers, st.Blockers...)
			}
			return r
		}
		switch p.Status {
		case StatusAtTarget, StatusPast, StatusRefused:
			r.Status, r.Reason = p.Status, p.Reason
			if len(r.Applied) > 0 && p.Status == StatusAtTarget {
				r.Status, r.Reason = StatusApplied, ""
			}
			return r
		}
		step := p.Steps[0]
		if step.Blocked() {
			if step.Waitable() && time.Now().Before(deadline) {
				if waitStart.IsZero() {
					waitStart = time.Now()
				}
				if err := sleep(ctx, min(opts.Poll, time.Until(deadline))); err != nil {
					return fail(err)
				}
				r.Waited = time.Since(waitStart)
				continue
			}
			if !waitStart.IsZero() {
				r.Waited = time.Since(waitStart)
			}
			r.Status, r.Steps, r.Blockers = StatusBlocked, p.Steps, step.Blockers
			r.Reason = step.String() + ": " + joinReasons(step.Blockers)
			return r
		}

		why := opts.Reason
		for _, b := range step.Blockers {
			if b.Forced {
				r.Blockers = append(r.Blockers, b)
				why = joinNonEmpty(why, b.Reason)
			}
		}
		testHookBeforeStep(group, step)
		_, err = zkstate.SetModeReason(ctx, s, root, group, step.From, step.To, opts.Who, why, c.ModeVersion)
		if err == nil {
			r.Applied = append(r.Applied, Step{From: step.From, To: step.To})
			r.Mode = step.To
			if step.To == opts.Target {
				r.Status = StatusApplied
				return r
			}
			continue
		}
		if !zkstate.IsModeConflict(err) && !errors.Is(err, zkstate.ErrModeMismatch) {
			return fail(err)
		}
		// Lost a compare-and-set: someone else changed the mode record since our census.
		retry, err := r.lostRace(ctx, s, root, c, step, opts.Target, retries < maxRetries)
		if err != nil {
			return fail(err)
		}
		if !retry {
			return r
		}
		retries++
	}
}

// lostRace settles a step whose compare-and-set failed because the mode record changed since
// the census c: the group reached the target anyway, or moved on the way to it (retry, when
// canRetry), or elsewhere (a conflict: nothing is written over what someone else set).
func (r *Result) lostRace(ctx context.Context, s *zkstate.Store, root string, c Census, step Step, target zkstate.Mode, canRetry bool) (retry bool, err error) {
	now, err := ReadCensus(ctx, s, root, c.Group, CensusOptions{})
	if err != nil {
		return false, err
	}
	r.Mode = now.Mode
	switch {
	case now.Mode == target:
		r.Status = StatusAtTarget
		if len(r.Applied) > 0 {
			r.Status = StatusApplied
		}
		r.Reason = fmt.Sprintf("reached %s concurrently (by %s)", now.Mode, now.Record.UpdatedBy)
		return false, nil
	case onTheWay(c.Mode, now.Mode, target) && canRetry:
		return true, nil
	}
	r.Status = StatusConflict
	by := now.Record.UpdatedBy
	if by == "" {
		by = "someone else"
	}
	r.Reason = fmt.Sprintf("%s: the group's mode changed under this command: it was %s, it is now %s (set by %s); nothing was written over it: look, then plan again",
		step, c.Mode, now.Mode, by)
	return false, nil
}

// testHookBeforeStep runs between a group's census and its compare-and-set: tests change the
// group there to lose the race on purpose.
var testHookBeforeStep = func(group string, step Step) {}

// onTheWay reports whether mode now lies between from (included) and target (excluded): a
// concurrent change that took the group no further than along the way we go (or changed the
// record without changing the mode), after which the plan can simply be made again.
func onTheWay(from, now, target zkstate.Mode) bool {
	f, n, t := modeIndex(from), modeIndex(now), modeIndex(target)
	if t >= f {
		return f <= n && n < t
	}
	return t < n && n <= f
}

func joinNonEmpty(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
